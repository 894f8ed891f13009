// Package etcd runs a twinmq fleet on etcd: a lane.Registry through which
// the consumers of a group, in many processes on many machines, find each
// other's lanes, and a config.Source that follows the configuration
// document a platform publishes to one key. It is a module of its own, so
// that the etcd client stays out of the dependency graph of services that
// do not use it.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-1:2379"}})
//	reg, err := etcd.NewRegistry(ctx, cli, etcd.Options{Logger: log})
//	src, err := etcd.NewSource(ctx, cli, "/twinmq/config/orders-service", etcd.Options{Logger: log})
//	c, err := consumer.New(ctx, group, topic, handle,
//		consumer.WithSource(src), consumer.WithLaneRegistry(reg), consumer.WithForwardToken(token))
//
// Close the consumers and producers, then the registry and the source,
// then the client: neither closes the client it was given.
//
// # The registry
//
// Each consumer instance is one key, <prefix>/lanes/<group>/<instance id>
// (both names path-escaped), holding the instance as JSON and attached to
// an etcd lease of its own. The lease's TTL is the consumer's
// lanes.leaseTTL rounded up to whole seconds (etcd counts leases in
// seconds, and grants no less than one and a half election timeouts), and
// the consumer keeps it alive by renewing it at a third of its TTL
// (Lease.Renew is one keep-alive). A newer registration of the same
// instance id moves the key to its own lease and revokes the old one, so
// the replaced holder learns it at its next renewal (lane.ErrLeaseExpired).
// Release revokes the lease, which deletes the key at once.
//
// A group's snapshot comes from a read of its prefix, then a watch from
// the next revision: etcd delivers every change after the read, in order,
// once. When the watch cannot resume where it was, the group is read
// again and the watch starts from that read: after a compaction removed
// the revisions it needed, after the watch broke, and after every outage
// (below). A snapshot's revision is the store's, so snapshots only grow;
// should the store come back with older revisions, a watch goes on from
// its last revision rather than go back. A key whose value is not a valid
// instance (bad JSON, a malformed lane, a value copied under another key)
// is skipped, logged and counted (twinmq_etcd_registry_undecodable_total),
// never fatal: the rest of the group routes as before.
//
// # The config source
//
// NewSource follows one key holding the configuration document. Watch
// reads it for the first version, then watches it; a version's revision is
// the key's mod revision, in decimal, which twinmqctl put prints and a
// platform can compare with what a producer or consumer reports. A document
// that does not parse or validate, and a deleted key (ErrNoDocument), reach
// the config.Watcher as a rejected version: the last good document keeps
// serving, and the rejection is logged and counted there.
//
// # When etcd is away
//
// NewRegistry and NewSource make one read before they return, and fail with
// ErrUnavailable (and the ctx's error) when ctx ends first, naming the
// endpoints: a process that cannot reach its etcd at start says so instead
// of starting blind. After that, an outage (the first failed call, or the
// client's connection failing) is logged once at Warn when it starts and
// once at Info when it ends, counted (twinmq_etcd_registry_outages_total,
// twinmq_etcd_config_outages_total), and shown by the ..._connected gauges.
// What each failure does:
//
//   - etcd down, or every member partitioned from the fleet. Watches keep
//     their last snapshot and the config source its last document: lanes go
//     on routing and producers go on sending as they were. Renewals fail,
//     but no lease expires meanwhile either, since etcd's leader extends
//     every lease when it takes office after the outage. When etcd returns,
//     every watch reads its range again (a changed or lost key shows at
//     once), and the consumers' lease loops renew, or register again where
//     the lease was lost.
//
//   - One consumer partitioned from etcd while its lease expires. The rest
//     of the fleet sees the instance leave at the lease's expiry and routes
//     its lane's messages to the next level of fallback (a.x to a, a to
//     base); nobody forwards to it any more. The partitioned consumer keeps
//     its last snapshot, so it still handles its own lane's messages that
//     the brokers hand to it directly. No message is handled by two lanes:
//     the brokers give each delivery to one consumer, that consumer routes
//     it once, and a forward is acked only after the handler at the target
//     succeeded; a message is handled twice only after its delivery failed
//     or its forward's outcome was unknown, and then it is redelivered, as
//     without lanes. When the partition heals, its renewal fails with
//     lane.ErrLeaseExpired, it registers again, and traffic of its lane
//     returns to it.
//
//   - etcd restarted empty (rebuilt, or restored from an old backup). Every
//     lease and key is gone and the revisions start over. Each watch, woken
//     by the end of the outage, reads its range again and delivers the
//     empty group with a revision above its last one; each consumer's next
//     renewal fails with lane.ErrLeaseExpired and it registers again within
//     a third of its TTL, so the group is whole again within about that
//     time, and routing falls back level by level in between (base traffic
//     is held for redelivery if base is briefly absent, never lost). The
//     configuration key is gone too: the config source reports
//     ErrNoDocument, which the Watcher rejects, so the last good
//     configuration keeps serving until the platform publishes again. A
//     document published after the rebuild may reach a mod revision the
//     old one had; the source then appends "/e<N>" to its revisions so
//     that it still applies.
package etcd
