// Package config is the configuration document of twinmq and the machinery
// that reloads it while a service runs. It knows no RocketMQ wire details.
//
// # The document
//
// One JSON document describes logic topics and the clusters behind them
// (endpoints, physical topic, weight, priority, TLS, credentials, shadow
// topic), batching, failover, timeouts, credentials, consumer groups, lane
// routing and shadow (stress-test) traffic:
//
//	{
//	  "topics": {
//	    "orders": {"clusters": [
//	      {"name": "dc1", "endpoints": ["10.0.0.1:8081"], "priority": 0, "credentials": "main"},
//	      {"name": "dc2", "endpoints": ["10.1.0.1:8081"], "priority": 1, "topic": "orders_dc2"}
//	    ]}
//	  },
//	  "batching":    {"enabled": true, "maxDelay": "10ms", "batchMaxBytes": 262144, "totalBatchMaxBytes": 33554432},
//	  "failover":    {"failureFactor": 0.5, "recovery": 0.01, "minWeight": 0.05, "probeInterval": "1s", "slowRequest": "500ms"},
//	  "timeouts":    {"request": "3s", "sendDeadline": "10s"},
//	  "credentials": {"main": {"accessKey": "ak", "accessSecret": "sk"}},
//	  "consumers":   {"billing": {"concurrency": 32, "maxAttempts": 16, "lane": "a.x"}},
//	  "lanes":       {"enabled": true, "leaseTTL": "10s", "forwardTimeout": "5s"},
//	  "shadow":      {"enabled": true, "topicSuffix": "_shadow", "groupSuffix": "_shadow"}
//	}
//
// Decisions:
//
//   - JSON only. The module has no YAML dependency, and a platform that
//     stores YAML converts before publishing.
//   - Strict decoding: unknown fields are errors. A misspelt key that fell
//     back to a default would be a silent misconfiguration; rejecting it
//     keeps the last good version serving and says why. A platform that adds
//     a field must roll out the SDK that knows it first.
//   - Keys match case-insensitively, as encoding/json does; a key given
//     twice keeps its last value.
//   - Durations are Go duration strings ("10ms"); a bare number is refused
//     because its unit would be a guess.
//   - Every problem of a document is reported at once, each by its path
//     ("batching.maxDelay: got the number 10, want a duration string ...").
//     Parse decodes field by field (with encoding/json's rules, but without
//     stopping at the first bad field) and fills in defaults (Default lists
//     them); Validate checks every rule. Both return a *ValidationError that
//     lists each problem, and a document Parse refuses also lists the rules
//     its other fields break. Both wrap ErrInvalidConfig. A cluster's weight 0 is allowed and
//     drains it; a topic whose clusters all weigh 0 is not.
//   - Shadow traffic (see Shadow) lives in topics and groups of its own,
//     named per cluster (shadowTopic) or by a rule for every topic and
//     group (shadow.topicPrefix/topicSuffix, groupPrefix/groupSuffix).
//     Validate refuses what could let the two sides meet: a shadow topic
//     that is a production topic of the document, a topic where only some
//     clusters have a shadow topic (shadow traffic could not fail over),
//     shadow topics without a group rule (the shadow group would be the
//     production group, whose retries and dead letters are shared), and a
//     shadow group that is also a listed production group. shadow.enabled
//     is the kill switch: a document that leaves it out has it on, a
//     Config built in code has it off until set.
//
// # Sources
//
// A Source yields Versions: a parsed document with a revision, or an error.
// Static serves one fixed document (tests, the embedded setup), Chan relays
// versions a caller pushes, and File watches a file.
//
// The file source polls; it does not use inotify. Every PollInterval
// (200 ms) it stats the path, following symlinks, and compares size,
// modification time and file identity with what it last read. Because the
// path is resolved again on every poll, the cases that break inotify
// watchers of a single file cannot hurt it: an editor's save by rename (a
// new inode behind the same name) and a Kubernetes ConfigMap update (the
// "..data" symlink swapped to a new directory) are both a changed identity.
// It never keeps a descriptor open across polls, works the same on every OS
// and on network or overlay filesystems where change notification is
// missing, and the latency it adds is small beside the tens of seconds a
// ConfigMap takes to propagate. Polling costs one stat per interval.
//
// A change is read only once the stat has held still for Settle (the
// debounce), the file is read whole (up to MaxDocumentBytes), and the stats
// taken just before and just after the read must both match the one that
// settled, otherwise the read is dropped and the file waits to settle again. So a half-written file is not read; if
// a writer pauses longer than Settle in mid-write, the half file fails to
// parse and is rejected, and the complete file is read on the next change.
// Content is hashed: the revision is the hash, and a rewrite with equal bytes
// yields nothing. Every RescanEvery (5 s) the file is read and hashed even if
// its stat looks unchanged, to catch edits that keep size and timestamp on
// filesystems with coarse timestamps. A missing or unreadable file yields a
// Version with an error once, not once per poll.
//
// # Watcher
//
// Start takes a Source and returns a Watcher once the first version is
// accepted (a bad, unreadable or missing first version fails Start with
// ErrInvalidConfig: there is nothing to fall back on; an ended ctx fails it
// with ctx's error). Then, for every version: validate, swap in with an atomic pointer,
// notify subscribers. A rejected version is logged through the injected
// zap logger, counted on twinmq_config_reloads_total{watcher,result="rejected"} (the
// watcher label is Options.Name; Close removes its series), and
// dropped; the last good document keeps serving and LastError says why. The
// same revision twice counts as "unchanged". Status gives a platform what
// to show beside each revision it published: the revision in force and
// when it was applied, and the latest refused version with its error and
// whether anything was accepted since. A source that ends leaves the last
// good document in force; the Watcher says so at Info, except for Static,
// whose end after its one version is expected (Debug). Subscribe returns the document
// in force and then calls back with (old, new) for each accepted version, in
// order, on the Watcher's goroutine; Diff tells a subscriber what moved.
//
// Documents handed out are shared and must not be modified. There is no
// package-level state: every Watcher owns its logger, metrics and
// goroutine, and several may share one Registerer.
package config
