package main

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/broker/auth"
)

// tlsEntry names the PEM files of the brokers' certificate and key.
type tlsEntry struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
}

// userEntry is one access key of the brokers' access control.
type userEntry struct {
	AccessKey string   `json:"accessKey"`
	SecretKey string   `json:"secretKey"`
	Super     bool     `json:"super"`
	Publish   []string `json:"publish"`
	Subscribe []string `json:"subscribe"`
	Groups    []string `json:"groups"`
}

// transactionEntry tunes the check-back of orphaned transactions.
type transactionEntry struct {
	Timeout       string `json:"timeout"`
	CheckInterval string `json:"checkInterval"`
	MaxChecks     int    `json:"maxChecks"`
}

// security builds the TLS and access-control part of every broker's
// config, and the transaction check settings.
func (fc *fileConfig) security() (broker.Security, broker.TransactionOptions, error) {
	var sec broker.Security
	var tx broker.TransactionOptions
	if fc.TLS != nil {
		cert, err := tls.LoadX509KeyPair(fc.TLS.CertFile, fc.TLS.KeyFile)
		if err != nil {
			return sec, tx, fmt.Errorf("%w: tls: %w", errConfig, err)
		}
		sec.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if len(fc.Users) > 0 {
		ac := &auth.Config{AuthenticationOnly: fc.AuthenticationOnly}
		for _, u := range fc.Users {
			ac.Users = append(ac.Users, auth.User{AccessKey: u.AccessKey, SecretKey: u.SecretKey, Super: u.Super,
				Publish: u.Publish, Subscribe: u.Subscribe, Groups: u.Groups})
		}
		// Validate here so that a bad user list is a config error.
		if _, err := auth.New(*ac); err != nil {
			return sec, tx, fmt.Errorf("%w: users: %w", errConfig, err)
		}
		sec.Auth = ac
	}
	if t := fc.Transactions; t != nil {
		var err error
		if tx.Timeout, err = optDuration(t.Timeout); err != nil {
			return sec, tx, fmt.Errorf("%w: transactions.timeout: %w", errConfig, err)
		}
		if tx.CheckInterval, err = optDuration(t.CheckInterval); err != nil {
			return sec, tx, fmt.Errorf("%w: transactions.checkInterval: %w", errConfig, err)
		}
		tx.MaxChecks = t.MaxChecks
	}
	return sec, tx, nil
}

func optDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
