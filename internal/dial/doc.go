// Package dial is the dial test behind cmd/twinmq-dial: it sends probe
// messages to every broker of every cluster of the configured logic topics,
// consumes them with its own group and reconciles, per broker, what was sent
// with what came back: lost, duplicated, end-to-end latency (p50, p99), send
// errors and the lateness of delayed probes.
//
// Decisions:
//
//   - Probes go through the driver, not the producer. The producer picks its
//     targets by health weights and retries a failed send on another broker:
//     the very failover that hides a sick broker from a service would hide it
//     from the dial test. A probe names its broker's endpoint and one of that
//     broker's writable queues (round robin), and a failure is that broker's.
//   - The brokers are those of each cluster's route for the topic's physical
//     topic (re-read every RouteInterval), a broker being its name at its
//     endpoint. Against RocketMQ 5 proxies the endpoint is the proxy's and
//     the proxy chooses the queue, so a probe reaches the proxy's brokers, not
//     one named broker; against the embedded brokers (one endpoint each) and
//     the classic protocol it reaches exactly one.
//   - Kinds: normal, delayed (delivery time Delay after the send) and
//     transactional (a half message committed at once). Each broker's sender
//     sends Rate probes a second, cycling through the kinds, so the topics
//     probed must accept every kind asked for (a Mixed topic, or ask for
//     fewer kinds). Probes carry the tag "twinmq-dial" and the dial group
//     receives that tag only, so a dial on a production topic leaves the
//     services' messages to their groups.
//   - A probe is lost when it has not come back Period after it was due (sent,
//     committed, or due for delivery); a send still waiting at that point
//     counts as lost too, so a broker that hangs is seen within one period.
//     A probe received twice is a duplicate; one that arrives after it was
//     called lost is counted as late, not as a duplicate. Probes are told
//     apart by message id.
//   - Every reconciliation tick (Period/4) looks at each broker: new losses,
//     duplicates or send errors since the last tick, or a p99 above MaxP99
//     (when set), make a report (a log line at Warn, twinmq_dial_reports_total
//     and Options.OnReport). twinmq_dial_broker_up is 0 from a report until a
//     period without one, so a broker whose sends fail every few seconds stays
//     down between its reports. Latency alone does not report unless MaxP99 is set:
//     on a loaded machine a healthy broker's tail latency moves, and a dial
//     test that cries wolf is muted.
//   - The configuration document is the one the services use (topics,
//     clusters, credentials, TLS, timeouts, the shadow section), followed
//     live through a config.Watcher: a topic or cluster that appears is
//     probed, one that leaves or changes is stopped, its series removed.
//   - The rate, body size and periods stay the dial's own Options (flags of
//     the command), not a section of the document. The document is read by
//     every service's SDK, and its decoding is strict: a "dial" section
//     would be an unknown field to every SDK older than it, so publishing it
//     would make those services refuse the document (new ones would not
//     start, running ones would stay on the old version) until the whole
//     fleet upgraded, for settings no service uses. And the settings belong
//     to one dial process, not to the fleet: a low-rate health dial and a
//     stress dial can read the same document at different rates. What the
//     dial must follow live is the document's (where the topics are, and
//     the shadow kill switch); changing the rate is a restart of the dial.
//   - Shadow mode (Options.Shadow) is the stress test: a high Rate whose
//     probes go to each cluster's shadow topic (config.ShadowTopic), carry
//     the shadow marker (lane.PropertyShadow) and come back through the
//     shadow group of the dial's group (config.ShadowGroup), so stress
//     traffic never lands in a production topic. The dial builds its
//     messages itself (see the first point), so it applies the rules the
//     producer applies to a shadow context: a topic without shadow topics
//     is not probed (New refuses it, with ErrShadowUnavailable, as it
//     refuses a document whose kill switch is off), and a reload turning
//     the kill switch off stops every probe and drops the brokers' books
//     and series until a reload turns it on again; nothing falls back to
//     the production topic.
//   - p50 and p99 are computed here over the latencies of the last two
//     periods, for the status page and the alert rules; the histograms carry
//     the same latencies for Grafana.
package dial
