// Command twinmqctl publishes the twinmq configuration document to the etcd
// key that producers and consumers follow (etcd.NewSource), and checks a
// document before it goes there.
//
// Usage:
//
//	twinmqctl [flags] COMMAND [flags] [FILE]
//
// Commands:
//
//	validate FILE  check FILE as the SDK does (config.Parse, then Validate)
//	               and print every problem with its path, one per line;
//	               FILE "-" is stdin. No etcd needed.
//	get            print the document at -key on stdout and "revision N"
//	               (its mod revision) on stderr; -revision-only prints just
//	               N; -o FILE writes the document to FILE and prints N.
//	put FILE       validate FILE, then publish it with a compare-and-swap on
//	               the key's mod revision, and print the new revision. The
//	               revision compared is -if-revision N (from an earlier get),
//	               or by default the one put reads itself; -create publishes
//	               the first document of a key that holds none.
//	diff FILE      what a reload would change, from the document at -key to
//	               FILE: topics, clusters (weight, priority, endpoints...),
//	               consumers, credentials, batching, failover, timeouts and
//	               lanes, one change per line.
//
// Flags may come before or after the command. Each has a line in
// "twinmqctl -h" and "twinmqctl COMMAND -h". -endpoints defaults to
// $TWINMQ_ETCD_ENDPOINTS, else 127.0.0.1:2379; -key to $TWINMQ_CONFIG_KEY.
// -timeout (default 5s) bounds the whole conversation with etcd.
// -cacert, -cert and -key-file turn on TLS to etcd.
//
// Exit codes, for scripts:
//
//	0  done (diff: no difference)
//	1  diff found differences
//	2  usage error (unknown flag, missing argument, unreadable file)
//	3  invalid document (FILE; for diff also the one in etcd)
//	4  etcd unreachable within -timeout, or an etcd error
//	5  conflict: someone else published since the revision put compared
//	   against (or, with -create, the key already holds a document);
//	   nothing was written
//	6  no document at the key
//
// An example session of an operator (diff's first line and the
// "revision" lines are on stderr):
//
//	$ export TWINMQ_ETCD_ENDPOINTS=etcd-1:2379,etcd-2:2379
//	$ export TWINMQ_CONFIG_KEY=/twinmq/config/orders-service
//	$ twinmqctl get > orders.json
//	revision 41
//	$ vi orders.json                      # dc1 weight 100 -> 10, lanes off
//	$ twinmqctl validate orders.json
//	orders.json: valid
//	$ twinmqctl diff orders.json
//	/twinmq/config/orders-service at revision 41 -> orders.json
//	topic orders: cluster dc1 weight 100 -> 10
//	lanes: enabled true -> false
//	$ twinmqctl put -if-revision 41 orders.json
//	twinmqctl: conflict: /twinmq/config/orders-service is at revision 44, not 41: someone else published since; nothing was written: get and diff, then put again
//	$ echo $?
//	5
//	$ twinmqctl get > theirs.json         # merge their change into orders.json
//	revision 44
//	$ twinmqctl put -if-revision 44 orders.json
//	45
//
// A document with mistakes lists each, and is never published:
//
//	$ twinmqctl validate bad.json
//	topics.orders.clusters[0].weight: 20000 must be in 0..10000
//	lanes.leaseTTL: 10ms must be at least 100ms (the lease is renewed every third of it)
//	$ echo $?
//	3
//
// A script reads the revision and the document in one call (-o writes the
// file with mode 0600: a document may hold credentials):
//
//	rev=$(twinmqctl get -o current.json) || exit
//	make-next-config < current.json > next.json
//	twinmqctl put -if-revision "$rev" next.json
//	case $? in 0) ;; 5) echo "changed meanwhile, start over";; *) exit 1;; esac
//
// Decisions:
//
//   - put never overwrites a document its user has not seen: the write is
//     an etcd transaction If(ModRevision(key) == rev) Then(Put), so a
//     document published in between makes it fail with code 5, and the
//     key keeps the other document. Without -if-revision the revision is
//     the one put reads just before writing, which only guards that short
//     window; an operator who edited a document from get passes the
//     revision get printed.
//   - put validates before it contacts etcd: an invalid document is never
//     written, since the SDK would reject it anyway and keep its last good
//     one, hiding the mistake until the next restart.
//   - The file's bytes are stored as they are, so get gives back exactly
//     what put was given.
//   - When put's transaction times out, whether it was applied is unknown:
//     the message says so, and get tells.
//   - diff lists what config.Diff finds, in detail down to each cluster's
//     fields; a secret is never printed, only that it changed. A document
//     in etcd that parses but breaks a rule is compared all the same, with
//     a note that the running processes kept an older one; one that does
//     not parse gives code 3.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/twinmq/twinmq/contrib/etcd/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
