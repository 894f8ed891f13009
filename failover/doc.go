// Package failover picks one resource among many by weighted health, and
// moves traffic off sick resources quickly and back onto them slowly.
//
// It knows nothing of messaging: a resource is a key, an opaque value of the
// caller's type and a few weights. The producer uses it to choose a cluster
// and broker for each send, the lane router to choose a consumer to forward
// to; anything with "several targets, prefer the healthy and the near ones"
// fits.
//
// # The model
//
// Every resource has a max weight (its share when healthy), a min weight
// (its floor) and an init weight (where it starts; low for a slow start).
// The caller reports the outcome of each use:
//
//   - Failure multiplies the weight by FailureFactor (0.5). If that leaves it
//     under DownRatio (1%) of the max weight it drops straight to the min
//     weight: seven failures in a row take a resource from full health to
//     down. Halving reacts fast enough that a dead cluster under load loses
//     its traffic within a handful of calls, while a single timeout only
//     halves a healthy resource's share.
//   - Success adds SuccessStep (1%) of the max weight, so recovery from half
//     health takes fifty successes: a flapping resource earns its traffic
//     back slowly. A down resource climbs by RecoverStep (10%) of the max
//     weight, after RecoverThreshold (1) successes in a row, so that the
//     first proof of life gives it a small share to prove itself with.
//   - A Success slower than SlowThreshold (off by default) counts as a
//     failure; with InflightAware each weight is divided by 1 + the picks of
//     that resource still outstanding, so a slow resource that accumulates
//     requests gets fewer new ones without any latency threshold.
//   - Down takes a resource to its floor at once.
//
// These are the defaults of Kuaishou's PriorityFailover (RatioWeightFunction),
// which serves this purpose at scale; they are all Config fields.
//
// # Bringing down resources back
//
// A resource at its min weight is down. Something must bring it back, or a
// cluster that restarted would be lost for good. A background round, started
// when a resource goes down and stopped when none is, runs every
// CheckInterval (1 s):
//
//   - With a Checker, it probes each down resource (and only those); a
//     successful probe counts as a success.
//   - Without one, a resource down for Quarantine (10 s, like the isolation
//     periods of RocketMQ's fault strategy and Envoy's outlier ejection) is
//     put back at min + RecoverStep x max on probation: its first success
//     confirms it, its first failure takes it straight down for another
//     quarantine. A dead resource so costs one failed call per quarantine.
//
// A MinWeight above zero adds a third path: a down resource keeps a trickle of
// real picks (its min weight), and their successes bring it back.
//
// # Priority groups
//
// Resources of equal Priority form a group; lower priorities are preferred
// (the local data centre first). A group's health is the sum of its weights
// over the sum of its max weights. Following Envoy's priority load, the first
// group takes min(1, health x OverprovisionFactor) of the traffic, the next
// group the same of what remains, and so on; if every group is degraded and
// the shares add up to less than one, traffic is split in proportion to them.
// The factor 1.4 lets a group lose about 30% of its capacity before any
// traffic spills, because a group at 72% still has room for all of it, and
// moves traffic off a group in proportion as it dies: once every resource of
// a group is down (weight 0), none of its traffic stays. SpillOnlyWhenDead
// keeps all traffic in a group until every resource of it is down.
//
// # Picks and retries
//
// Within the chosen group the pick is weighted random over the current
// weights. A retry passes the handles it already tried to Pick (or
// PickExcluding); excluded resources count as absent, for their group's
// health too, so a retry after the one local broker failed goes to the other
// data centre at once. When everything left has weight zero and nothing at
// all is up, Pick still returns a resource of the most preferred remaining
// group: a stale verdict must cost one attempt, never an error. But when
// everything left is down while a resource already tried is up, Pick
// returns ErrNoResource: a down resource is left to its probes (or
// quarantine) while there is an up one to come back to, so a retry loop
// that starts over after a pause goes back to the up ones instead of
// sending one request to every down resource after each failure there.
// ErrNoResource means nothing is left to try: an empty set, everything
// excluded, or only down resources left while an excluded one is up.
//
// # Live updates
//
// Update swaps in a new resource set, for a configuration reload. A key that
// stays keeps its health, carried as a share of its max weight (half health
// stays half health under a new max; down stays down); a new key starts at
// its init weight; a removed key is no longer picked and reports through its
// old handles are ignored. Picks during the swap see the old or the new set
// of resources, never a mix. Weights are not part of a set: while Update
// rescales a kept resource whose max weight changed, a pick that overlaps
// it may judge that resource against the other set's bounds, so a handful
// of picks during a reload can spill between groups.
//
// Reconfigure changes the tuning (factors, steps, spill policy, checker and
// its interval, quarantine) of a live picker, for a reload of those
// settings: the resources, their health, their handles and their metric
// series stay, so picks made before it still report to the same picker.
// Building a second picker of the same name instead would share, and on
// Close delete, the first one's metric series.
//
// # Concurrency and cost
//
// The pick path loads an atomic pointer to an immutable snapshot (the sorted
// resources and their groups) and reads each resource's weight from an
// atomic: no lock and no allocation. A group's health is summed from its
// resources' weights on each pick rather than kept as a running total beside
// them, so the two can never disagree (a drift of that kind once left a
// drained group looking alive in PriorityFailover). Outcomes change weights
// by compare-and-swap; a success on a healthy resource writes nothing at
// all, so the steady state causes no cache-line traffic between cores.
// Random numbers come from the runtime's per-thread generator
// (math/rand/v2), so picking goroutines share no state either.
//
// The common case has a fast path: no exclusions and a first group of up to
// 16 resources that takes all traffic. It reads each weight once and, when
// the weights are equal, indexes directly instead of walking. Otherwise a
// pick costs a pass or two over the members of the groups it considers,
// which suits a handful of clusters and brokers; the benchmarks measure 2, 5
// and 100 resources.
//
// # Observability
//
// With a Registerer, twinmq_failover_weight{picker,cluster,endpoint} shows
// each current weight and twinmq_failover_down_total{picker,cluster,endpoint}
// counts falls to the floor (Resource.Cluster and Resource.Endpoint, or the
// key as endpoint when both are empty). A WeightListener hears every weight change, for callers
// that export them their own way. Resources going down and coming back are
// logged at Warn and Info on the injected logger.
package failover
