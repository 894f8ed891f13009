package timer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/twinmq/twinmq/internal/store"
	"github.com/twinmq/twinmq/internal/store/vfs"
)

func osFS() store.FS { return vfs.OS() }

const (
	recordSize  = 40
	recordMagic = 0x544d5231 // "TMR1"
	flagRolled  = 1 << 0
	logSuffix   = ".tlog"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeRecord(b []byte, e entry) {
	binary.LittleEndian.PutUint32(b[0:], recordMagic)
	var f uint32
	if e.rolled {
		f |= flagRolled
	}
	binary.LittleEndian.PutUint32(b[4:], f)
	binary.LittleEndian.PutUint64(b[8:], uint64(e.at))
	binary.LittleEndian.PutUint64(b[16:], uint64(e.slot))
	binary.LittleEndian.PutUint64(b[24:], uint64(e.offset))
	binary.LittleEndian.PutUint32(b[32:], 0)
	binary.LittleEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
}

func decodeRecord(b []byte) (entry, error) {
	if len(b) < recordSize {
		return entry{}, fmt.Errorf("%w: short record (%d bytes)", ErrCorrupt, len(b))
	}
	if binary.LittleEndian.Uint32(b[0:]) != recordMagic {
		return entry{}, fmt.Errorf("%w: bad record magic", ErrCorrupt)
	}
	if crc32.Checksum(b[:36], castagnoli) != binary.LittleEndian.Uint32(b[36:]) {
		return entry{}, fmt.Errorf("%w: record CRC mismatch", ErrCorrupt)
	}
	f := binary.LittleEndian.Uint32(b[4:])
	return entry{
		at:     int64(binary.LittleEndian.Uint64(b[8:])),
		slot:   int64(binary.LittleEndian.Uint64(b[16:])),
		offset: int64(binary.LittleEndian.Uint64(b[24:])),
		rolled: f&flagRolled != 0,
	}, nil
}

// segment is one timer log file.
type segment struct {
	first   int64 // index of its first record
	f       vfs.File
	n       int64 // records in it
	maxSlot int64 // largest slot time of its records
}

// timerLog is the append-only log of scheduled entries, in segment files.
type timerLog struct {
	fs      store.FS
	dir     string
	perSeg  int64
	mu      sync.Mutex
	segs    []*segment
	buf     [recordSize]byte
	dirty   bool
	written int64 // records appended since open, for stats
}

func segName(first int64) string { return fmt.Sprintf("%020d%s", first, logSuffix) }

// openLog opens the log in dir and calls fn with every valid record, in log
// order. A record that fails its checks ends its segment: the segment is
// truncated there (a torn tail after a crash).
func openLog(fs store.FS, dir string, perSeg int, fn func(entry)) (*timerLog, error) {
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("timer: create %s: %w", dir, err)
	}
	l := &timerLog{fs: fs, dir: dir, perSeg: int64(perSeg)}
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("timer: list %s: %w", dir, err)
	}
	for _, name := range names {
		if filepath.Ext(name) != logSuffix {
			continue
		}
		first, err := strconv.ParseInt(name[:len(name)-len(logSuffix)], 10, 64)
		if err != nil {
			continue
		}
		f, err := fs.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0o644)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("timer: open %s: %w", name, err)
		}
		seg := &segment{first: first, f: f, maxSlot: -1 << 63}
		l.segs = append(l.segs, seg)
		size, err := f.Size()
		if err != nil {
			l.close()
			return nil, fmt.Errorf("timer: size of %s: %w", name, err)
		}
		data := make([]byte, size)
		// A failed read is no torn tail: the zeroes left in data would cut
		// the segment to nothing.
		if k, err := f.ReadAt(data, 0); int64(k) != size {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			l.close()
			return nil, fmt.Errorf("timer: read %s: %w", name, err)
		}
		var n int64
		for off := int64(0); off+recordSize <= size; off += recordSize {
			e, err := decodeRecord(data[off : off+recordSize])
			if err != nil {
				break
			}
			seg.maxSlot = max(seg.maxSlot, e.slot)
			fn(e)
			n++
		}
		seg.n = n
		if n*recordSize != size {
			if err := f.Truncate(n * recordSize); err != nil {
				l.close()
				return nil, fmt.Errorf("timer: truncate torn tail of %s: %w", name, err)
			}
			l.dirty = true
		}
	}
	return l, nil
}

// append writes one record at the end of the log.
func (l *timerLog) append(e entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var seg *segment
	if len(l.segs) > 0 {
		seg = l.segs[len(l.segs)-1]
	}
	if seg == nil || seg.n >= l.perSeg {
		first := int64(0)
		if seg != nil {
			first = seg.first + seg.n
		}
		f, err := l.fs.OpenFile(filepath.Join(l.dir, segName(first)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("timer: create log segment: %w", err)
		}
		seg = &segment{first: first, f: f, maxSlot: -1 << 63}
		l.segs = append(l.segs, seg)
	}
	encodeRecord(l.buf[:], e)
	if _, err := seg.f.WriteAt(l.buf[:], seg.n*recordSize); err != nil {
		return fmt.Errorf("timer: write log record: %w", err)
	}
	seg.n++
	seg.maxSlot = max(seg.maxSlot, e.slot)
	l.dirty = true
	l.written++
	return nil
}

// sync makes every appended record durable, but not the names of segments
// created or dropped since the last checkpoint: the checkpoint's directory
// sync, which follows, covers them. The fsyncs run outside the
// log's lock so that enqueues (and through them the wheel) never wait for
// the disk; only the checkpoint goroutine syncs, drops or closes segments,
// so the files stay open meanwhile.
func (l *timerLog) sync() error {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	l.dirty = false
	files := make([]vfs.File, len(l.segs))
	for i, s := range l.segs {
		files[i] = s.f
	}
	l.mu.Unlock()
	for _, f := range files {
		if err := f.Sync(); err != nil {
			l.mu.Lock()
			l.dirty = true
			l.mu.Unlock()
			return fmt.Errorf("timer: sync log: %w", err)
		}
	}
	return nil
}

// dropBefore deletes the segments, other than the last, whose every slot
// time is below cursor: their entries are all delivered or rolled.
func (l *timerLog) dropBefore(cursor int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.segs) > 1 && l.segs[0].maxSlot < cursor {
		s := l.segs[0]
		s.f.Close()
		if err := l.fs.Remove(filepath.Join(l.dir, segName(s.first))); err != nil {
			return fmt.Errorf("timer: remove log segment: %w", err)
		}
		l.segs = l.segs[1:]
	}
	return nil
}

func (l *timerLog) segments() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.segs)
}

func (l *timerLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		s.f.Close()
	}
	l.segs = nil
}

// Checkpoint file: magic u32 | version u32 | cursor ms i64 | next system
// offset i64 | CRC32-C u32 of the preceding bytes.
const (
	checkpointName  = "checkpoint"
	checkpointMagic = 0x544d4350 // "TMCP"
	checkpointSize  = 28
)

type checkpoint struct {
	cursor  int64 // every entry with slot time below it was handed out
	enqNext int64 // every system-topic message below it has a log record
}

func readCheckpoint(fs store.FS, dir string) (checkpoint, bool, error) {
	name := filepath.Join(dir, checkpointName)
	exists, _, err := fs.Stat(name)
	if err != nil || !exists {
		return checkpoint{}, false, err
	}
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return checkpoint{}, false, fmt.Errorf("timer: open checkpoint: %w", err)
	}
	defer f.Close()
	b := make([]byte, checkpointSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return checkpoint{}, false, fmt.Errorf("%w: checkpoint unreadable: %w", ErrCorrupt, err)
	}
	if binary.LittleEndian.Uint32(b[0:]) != checkpointMagic || binary.LittleEndian.Uint32(b[4:]) != 1 ||
		crc32.Checksum(b[:24], castagnoli) != binary.LittleEndian.Uint32(b[24:]) {
		return checkpoint{}, false, fmt.Errorf("%w: checkpoint fails its checks", ErrCorrupt)
	}
	return checkpoint{
		cursor:  int64(binary.LittleEndian.Uint64(b[8:])),
		enqNext: int64(binary.LittleEndian.Uint64(b[16:])),
	}, true, nil
}

// writeCheckpoint replaces the checkpoint atomically: a synced temporary
// file renamed over the old one, then the directory synced.
func writeCheckpoint(fs store.FS, dir string, c checkpoint) error {
	b := make([]byte, checkpointSize)
	binary.LittleEndian.PutUint32(b[0:], checkpointMagic)
	binary.LittleEndian.PutUint32(b[4:], 1)
	binary.LittleEndian.PutUint64(b[8:], uint64(c.cursor))
	binary.LittleEndian.PutUint64(b[16:], uint64(c.enqNext))
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	tmp := filepath.Join(dir, checkpointName+".tmp")
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("timer: write checkpoint: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(b, 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("timer: write checkpoint: %w", err)
		}
	} else {
		f.Close()
		return fmt.Errorf("timer: write checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("timer: write checkpoint: %w", err)
	}
	if err := fs.Rename(tmp, filepath.Join(dir, checkpointName)); err != nil {
		return fmt.Errorf("timer: write checkpoint: %w", err)
	}
	// Until the directory is synced a power loss may undo the rename, or
	// keep no checkpoint at all (the first one): the timer would then hand
	// out again what it had delivered. The same sync makes the names of the
	// log segments created or dropped since the last one durable: they
	// share the directory, and the log was synced just before.
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("timer: write checkpoint: %w", err)
	}
	return nil
}
