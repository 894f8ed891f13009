package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A fully qualified DNS name may end with a dot (the root label): Go's
// resolver and gRPC's dns resolver accept it. It is common in Kubernetes to
// skip the search domains, e.g. "rocketmq-proxy.mq.svc.cluster.local.:8081".
func TestEndpointWithTrailingDotIsAHostName(t *testing.T) {
	c := validBase()
	c.Topics["t"].Clusters[0].Endpoints = []string{"rocketmq-proxy.mq.svc.cluster.local.:8081"}
	require.NoError(t, c.Validate())
}

// Endpoints: IPv6 addresses (a link-local one with its zone too) and
// fully qualified names pass; empty labels, spaces and signed ports fail.
func TestEndpointForms(t *testing.T) {
	for _, ep := range []string{"[fe80::1%eth0]:8081", "[::1]:8081", "10.0.0.1:8081", "a.b.:1"} {
		c := validBase()
		c.Topics["t"].Clusters[0].Endpoints = []string{ep}
		require.NoError(t, c.Validate(), ep)
	}
	for _, ep := range []string{".:8081", "a..b:1", " 10.0.0.1:8081", "h:+80", "..:1"} {
		c := validBase()
		c.Topics["t"].Clusters[0].Endpoints = []string{ep}
		require.Error(t, c.Validate(), ep)
	}
}
