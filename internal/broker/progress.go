package broker

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// Consumer progress is persisted as a checkpoint: a JSON document with every
// (group, topic, queue) state (committed offset, next offset, offsets acked
// ahead, in-flight deliveries with their attempts, deadlines and nonces). It
// is written when progress changed, every CheckpointInterval and on Close,
// to a temporary file that is fsynced and renamed over the previous one, and
// the directory is fsynced: a crash leaves either the old or the new
// checkpoint, never a torn one.
//
// Why a checkpoint and not a log of every ack: the state is small (bounded
// by what is in flight), the write cost does not grow with the ack rate, and
// what a crash can lose (the acks of the last interval) only causes
// redeliveries, which at-least-once delivery allows. In-flight entries are
// kept so that after a restart a delivery made before it can still be acked
// with its receipt handle, and its attempts keep counting towards the
// dead-letter topic.

const progressVersion = 1

type progressFile struct {
	Version int             `json:"version"`
	Broker  string          `json:"broker"`
	Queues  []queueSnapshot `json:"queues"`
}

type queueSnapshot struct {
	Group     string             `json:"group"`
	Topic     string             `json:"topic"`
	Queue     int32              `json:"queue"`
	Committed int64              `json:"committed"`
	Next      int64              `json:"next"`
	Acked     []int64            `json:"acked,omitempty"`
	Inflight  []inflightSnapshot `json:"inflight,omitempty"`
}

type inflightSnapshot struct {
	Offset    int64  `json:"o"`
	Attempts  int32  `json:"a"`
	Deadline  int64  `json:"d"`
	Nonce     uint64 `json:"n,omitempty"`
	PopTime   int64  `json:"p,omitempty"`
	AutoRenew bool   `json:"r,omitempty"`
	RenewFrom int64  `json:"f,omitempty"`
	Client    string `json:"c,omitempty"`
}

func (b *Broker) progressPath() string {
	return filepath.Join(b.cfg.DataDir, "progress", "consumer.json")
}

// snapshotProgress copies every group's state; each groupTopic is copied
// under its own lock.
func (b *Broker) snapshotProgress() progressFile {
	b.mu.RLock()
	gts := make([]*groupTopic, 0, len(b.subs))
	for _, g := range b.subs {
		gts = append(gts, g)
	}
	b.mu.RUnlock()
	pf := progressFile{Version: progressVersion, Broker: b.cfg.Name}
	for _, g := range gts {
		g.mu.Lock()
		for qid, qs := range g.queues {
			s := queueSnapshot{Group: g.group, Topic: g.topic, Queue: qid, Committed: qs.committed, Next: qs.next}
			for off := range qs.acked {
				s.Acked = append(s.Acked, off)
			}
			sort.Slice(s.Acked, func(i, j int) bool { return s.Acked[i] < s.Acked[j] })
			for _, e := range qs.inflight {
				s.Inflight = append(s.Inflight, inflightSnapshot{
					Offset: e.offset, Attempts: e.attempts, Deadline: e.deadline, Nonce: e.nonce,
					PopTime: e.popTime, AutoRenew: e.autoRenew, RenewFrom: e.renewFrom, Client: e.client,
				})
			}
			sort.Slice(s.Inflight, func(i, j int) bool { return s.Inflight[i].Offset < s.Inflight[j].Offset })
			pf.Queues = append(pf.Queues, s)
		}
		g.mu.Unlock()
	}
	sort.Slice(pf.Queues, func(i, j int) bool {
		a, c := pf.Queues[i], pf.Queues[j]
		if a.Group != c.Group {
			return a.Group < c.Group
		}
		if a.Topic != c.Topic {
			return a.Topic < c.Topic
		}
		return a.Queue < c.Queue
	})
	return pf
}

// writeProgress writes the checkpoint atomically and durably.
func (b *Broker) writeProgress() error {
	version := b.progressVer.Load()
	pf := b.snapshotProgress()
	data, err := json.Marshal(pf)
	if err != nil {
		return fmt.Errorf("broker: encode consumer progress: %w", err)
	}
	path := b.progressPath()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("broker: consumer progress: %w", err)
	}
	tmp := path + ".tmp"
	// Offsets only, no secrets: 0644 like the store's data files (see G306
	// in the lint configuration) and RocketMQ's consumerOffset.json.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644) //nolint:gosec // G302: see above
	if err != nil {
		return fmt.Errorf("broker: consumer progress: %w", err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("broker: write consumer progress: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("broker: consumer progress: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		serr := d.Sync()
		_ = d.Close()
		if serr != nil {
			return fmt.Errorf("broker: sync consumer progress dir: %w", serr)
		}
	}
	b.progressSaved.Store(version)
	return nil
}

// loadProgress restores the checkpoint, if any. A state that runs past what
// the store recovered (an async-flushed tail lost in a crash) is cut to the
// store's range.
func (b *Broker) loadProgress() error {
	data, err := os.ReadFile(b.progressPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: read consumer progress: %w", err)
	}
	var pf progressFile
	if err := json.Unmarshal(data, &pf); err != nil {
		return fmt.Errorf("broker: decode consumer progress %s: %w", b.progressPath(), err)
	}
	if pf.Version != progressVersion {
		return fmt.Errorf("broker: consumer progress %s has version %d, want %d", b.progressPath(), pf.Version, progressVersion)
	}
	for _, s := range pf.Queues {
		g := b.groupTopicFor(s.Group, s.Topic)
		min, max := b.store.Offsets(s.Topic, s.Queue)
		qs := newQueueState(s.Committed)
		qs.next = s.Next
		if qs.next > max {
			qs.next = max
		}
		if qs.committed > qs.next {
			qs.committed = qs.next
		}
		for _, off := range s.Acked {
			if off >= qs.committed && off < qs.next {
				qs.acked[off] = struct{}{}
			}
		}
		for _, in := range s.Inflight {
			if in.Offset < qs.committed || in.Offset >= qs.next {
				continue
			}
			e := &inflight{offset: in.Offset, attempts: in.Attempts, deadline: in.Deadline, nonce: in.Nonce,
				popTime: in.PopTime, autoRenew: in.AutoRenew, renewFrom: in.RenewFrom, client: in.Client, idx: -1}
			qs.inflight[e.offset] = e
			heap.Push(&qs.due, e)
		}
		// Offsets in [committed, next) that are neither acked nor in flight
		// were delivered after the checkpoint; deliver them again.
		for off := qs.committed; off < qs.next; off++ {
			if _, ok := qs.acked[off]; ok {
				continue
			}
			if _, ok := qs.inflight[off]; ok {
				continue
			}
			qs.next = off
			break
		}
		for off := range qs.acked {
			if off >= qs.next {
				delete(qs.acked, off)
			}
		}
		for off, e := range qs.inflight {
			if off >= qs.next {
				heap.Remove(&qs.due, e.idx)
				delete(qs.inflight, off)
			}
		}
		qs.advance()
		qs.skipTo(min)
		g.mu.Lock()
		g.queues[s.Queue] = qs
		for _, e := range qs.inflight {
			if e.autoRenew {
				g.autoRenew++
			}
		}
		g.mu.Unlock()
	}
	return nil
}
