package embedded

import (
	"time"

	"github.com/twinmq/twinmq/internal/broker"
	"github.com/twinmq/twinmq/internal/broker/auth"
)

// User is an access key the brokers accept when Options.Users is set, with
// its permissions. Topic and group entries are exact names, "*" (all) or a
// prefix followed by "*".
type User struct {
	AccessKey string
	SecretKey string
	// Super may do everything.
	Super bool
	// Publish lists the topics the user may send to (and end transactions
	// of).
	Publish []string
	// Subscribe lists the topics the user may receive from.
	Subscribe []string
	// Groups lists the consumer groups the user may consume as.
	Groups []string
}

// TransactionCheck tunes how the brokers check back orphaned transactions.
// Zero fields take RocketMQ's defaults: first check 6 s after the half
// message (or its own recovery duration), then every 30 s, 15 checks at
// most before the half message is discarded.
type TransactionCheck struct {
	Timeout   time.Duration
	Interval  time.Duration
	MaxChecks int
}

// security fills the delay, transaction and security parts of a broker's
// config from the options.
func (o *Options) security(cfg *broker.Config) {
	cfg.Transactions = broker.TransactionOptions{
		Timeout:       o.TransactionCheck.Timeout,
		CheckInterval: o.TransactionCheck.Interval,
		MaxChecks:     o.TransactionCheck.MaxChecks,
	}
	cfg.Timer = broker.TimerOptions{MaxDelay: o.MaxDelay}
	if o.MaxDelay > 0 {
		// The accept bound of SendMessage follows the timer's maximum.
		cfg.Limits.MaxDelay = o.MaxDelay
	}
	cfg.Security.TLS = o.TLS
	if len(o.Users) > 0 {
		ac := &auth.Config{AuthenticationOnly: o.AuthenticationOnly, Logger: o.Logger}
		for _, u := range o.Users {
			ac.Users = append(ac.Users, auth.User{
				AccessKey: u.AccessKey, SecretKey: u.SecretKey, Super: u.Super,
				Publish: u.Publish, Subscribe: u.Subscribe, Groups: u.Groups,
			})
		}
		cfg.Security.Auth = ac
	}
}
