package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"agentsociety/store"
)

// The event log lives apart from the journal, in eventsName: segment files
// of eventsPerSegment events each, named by the Seq of their first event,
// one JSON line per event. Appends go to the newest segment; trimming
// removes whole segments, so a store keeps up to one segment more than
// asked. A crash may leave the newest segment's last line torn: opening
// the log cuts it off, and so does the next call after a failed write.
// Under SyncEveryRecord each append is synced; under SyncBatched a segment
// is synced when the next one starts and at Close, so a machine crash may
// lose the newest segment's unsynced events. Event writes never wait for
// the journal or hold it up.
// syncEvents syncs a segment after an append under SyncEveryRecord; tests
// replace it to make a sync fail.
var syncEvents = datasync

const (
	eventsName       = "events"
	eventsPerSegment = 1024
	segmentSuffix    = ".jsonl"
)

// eventLog is the store's event log; the zero value is unopened, and
// opens on first use.
type eventLog struct {
	mu       sync.Mutex
	opened   bool
	segments []segment // oldest first
	file     *os.File  // the newest segment, opened for appending; nil if none
	size     int64     // bytes in file, as far as appends are acknowledged
	line     []byte    // reused to build lines
}

// segment is one segment file: events first to last; last is first-1
// while it is empty.
type segment struct {
	first, last uint64
}

func (sg segment) len() uint64 { return sg.last + 1 - sg.first }

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentSuffix) }

// eventLine is one line of a segment.
type eventLine struct {
	Seq  uint64          `json:"seq"`
	Data json.RawMessage `json:"data"`
}

// appendEventLine appends e to buf as a line of a segment: the line
// json.Marshal makes of its eventLine, without encoding the event again
// when its data is on one line already, as a society's events are (the
// data is one JSON value, as [store.EventLog] requires).
func appendEventLine(buf []byte, e store.Event) ([]byte, error) {
	if bytes.IndexByte(e.Data, '\n') >= 0 || !json.Valid(e.Data) {
		line, err := json.Marshal(eventLine{e.Seq, e.Data})
		if err != nil {
			return buf, err
		}
		return append(append(buf, line...), '\n'), nil
	}
	buf = strconv.AppendUint(append(buf, `{"seq":`...), e.Seq, 10)
	buf = append(append(buf, `,"data":`...), e.Data...)
	return append(buf, "}\n"...), nil
}

// AppendEvents appends events to the log; see [store.EventLog].
func (s *Store) AppendEvents(ctx context.Context, events []store.Event) error {
	return s.withEvents(ctx, func(l *eventLog) error { return s.appendEvents(l, events) })
}

// appendEvents is AppendEvents, called by withEvents.
func (s *Store) appendEvents(l *eventLog, events []store.Event) error {
	for i, e := range events[min(1, len(events)):] {
		if e.Seq <= events[i].Seq {
			return fmt.Errorf("filestore: event %d comes after event %d in the batch: events are appended in ascending Seq order", e.Seq, events[i].Seq)
		}
	}
	for len(events) > 0 {
		e := events[0]
		n := len(l.segments)
		if n > 0 && e.Seq <= l.segments[n-1].last {
			return fmt.Errorf("filestore: event %d does not follow the last kept, %d", e.Seq, l.segments[n-1].last)
		}
		if n == 0 || l.segments[n-1].len() >= eventsPerSegment {
			if err := s.newSegment(e.Seq); err != nil {
				return err
			}
		} else if l.file == nil {
			f, err := os.OpenFile(filepath.Join(s.dir, eventsName, segmentName(l.segments[n-1].first)), os.O_WRONLY|os.O_APPEND, fileMode)
			if err != nil {
				return fmt.Errorf("filestore: %w", err)
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return fmt.Errorf("filestore: %w", err)
			}
			l.file, l.size = f, fi.Size()
		}
		cur := &l.segments[len(l.segments)-1]
		batch := events[:min(int(eventsPerSegment-cur.len()), len(events))]
		l.line = l.line[:0]
		for _, e := range batch {
			var err error
			if l.line, err = appendEventLine(l.line, e); err != nil {
				return fmt.Errorf("filestore: event %d: %w", e.Seq, err)
			}
		}
		_, err := l.file.Write(l.line)
		if err == nil && s.opts.Sync == SyncEveryRecord {
			err = syncEvents(l.file)
		}
		if err != nil {
			// What was written of the batch may be half a line, or whole
			// lines a failed sync did not make durable: cut the batch
			// off, so that the log (and EventBounds, by which a society
			// learns what was kept) does not hold events it did not
			// acknowledge, and open the log again on the next call,
			// which cuts a torn line off if this cut failed.
			err = fmt.Errorf("filestore: writing events: %w", err)
			if terr := l.file.Truncate(l.size); terr != nil {
				err = fmt.Errorf("%w; cutting the batch off: %w", err, terr)
			}
			l.file.Close()
			l.file, l.segments, l.opened = nil, nil, false
			return err
		}
		l.size += int64(len(l.line))
		cur.last = batch[len(batch)-1].Seq
		events = events[len(batch):]
	}
	return nil
}

// newSegment starts a segment whose first event is first. Called with
// s.events.mu held.
func (s *Store) newSegment(first uint64) error {
	l := &s.events
	dir := filepath.Join(s.dir, eventsName)
	// Only the newest segment may end torn (see openEvents): the one
	// before is synced before a newer one exists.
	if err := s.syncNewest(); err != nil {
		return fmt.Errorf("filestore: syncing events: %w", err)
	}
	name := filepath.Join(dir, segmentName(first))
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, fileMode)
	if errors.Is(err, fs.ErrExist) {
		// Left by a newSegment that failed after making it: the log does
		// not know it, and it holds nothing the log acknowledged.
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_TRUNC, fileMode)
	}
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return fmt.Errorf("filestore: %w", err)
	}
	if l.file != nil {
		l.file.Close()
	}
	l.file, l.size = f, 0
	l.segments = append(l.segments, segment{first, first - 1})
	return nil
}

// syncNewest makes the newest segment's events durable, whether this
// Store has it open or not (after a reopen, it has not written to it yet).
// Called with s.events.mu held.
func (s *Store) syncNewest() error {
	l := &s.events
	if l.file != nil {
		return datasync(l.file)
	}
	n := len(l.segments)
	if n == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.dir, eventsName, segmentName(l.segments[n-1].first)), os.O_WRONLY, fileMode)
	if err != nil {
		return err
	}
	defer f.Close()
	return datasync(f)
}

// ReadEvents returns up to limit events from Seq from on; see
// [store.EventLog].
func (s *Store) ReadEvents(ctx context.Context, from uint64, limit int) ([]store.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.closeMu.RUnlock()
	l := &s.events
	l.mu.Lock()
	if err := s.openEvents(); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	segs := slices.Clone(l.segments)
	l.mu.Unlock()
	// Segments are only appended to and removed whole, and the lines up to
	// a segment's last, as read under the lock, are complete.
	var out []store.Event
	for _, sg := range segs {
		if len(out) >= limit {
			break
		}
		if sg.last < from || sg.len() == 0 {
			continue
		}
		evs, err := s.readSegment(sg, from, limit-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, evs...)
	}
	return out, nil
}

// readSegment returns up to limit events of sg from Seq from on.
func (s *Store) readSegment(sg segment, from uint64, limit int) ([]store.Event, error) {
	name := filepath.Join(s.dir, eventsName, segmentName(sg.first))
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // trimmed meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	defer f.Close()
	var out []store.Event
	r := bufio.NewReader(f)
	var off, prev uint64 // the line's offset; the Seq of the line before
	for len(out) < limit {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("filestore: reading %s: %w", name, err)
		}
		e, ok := parseEventLine(line, sg.first, prev, off > 0)
		if !ok {
			return nil, fmt.Errorf("%w %s: the event line at offset %d is damaged (after event %d)", ErrCorrupt, name, off, prev)
		}
		if e.Seq > sg.last {
			break // written after the segment was listed
		}
		off += uint64(len(line))
		prev = e.Seq
		if e.Seq >= from {
			out = append(out, store.Event{Seq: e.Seq, Data: e.Data})
		}
	}
	return out, nil
}

// TrimEvents removes the segments whose events all come before before,
// except the newest; see [store.EventLog].
func (s *Store) TrimEvents(ctx context.Context, before uint64) error {
	return s.withEvents(ctx, func(l *eventLog) error { return s.trimEvents(l, before) })
}

// trimEvents is TrimEvents, called by withEvents.
func (s *Store) trimEvents(l *eventLog, before uint64) error {
	dir := filepath.Join(s.dir, eventsName)
	n := 0
	for n < len(l.segments)-1 && l.segments[n].last < before {
		if err := os.Remove(filepath.Join(dir, segmentName(l.segments[n].first))); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.segments = l.segments[n:]
			return fmt.Errorf("filestore: %w", err)
		}
		n++
	}
	l.segments = l.segments[n:]
	return nil
}

// EventBounds returns the oldest and newest Seqs kept; see [store.EventLog].
func (s *Store) EventBounds(ctx context.Context) (first, last uint64, err error) {
	err = s.withEvents(ctx, func(l *eventLog) error {
		if n := len(l.segments); n > 0 {
			first, last = l.segments[0].first, l.segments[n-1].last
		}
		return nil
	})
	return first, last, err
}

// withEvents runs f on the opened event log, with the log's lock held, as
// a call of the store (see enter).
func (s *Store) withEvents(ctx context.Context, f func(l *eventLog) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.closeMu.RUnlock()
	l := &s.events
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.openEvents(); err != nil {
		return err
	}
	return f(l)
}

// openEvents lists the segments, once, and cuts a torn last line off the
// newest. Called with s.events.mu held.
func (s *Store) openEvents() error {
	l := &s.events
	if l.opened {
		return nil
	}
	dir := filepath.Join(s.dir, eventsName)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	var firsts []uint64
	for _, e := range entries {
		num, ok := strings.CutSuffix(e.Name(), segmentSuffix)
		if !ok {
			continue
		}
		first, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue
		}
		firsts = append(firsts, first)
	}
	slices.Sort(firsts)
	// The newest segment may end torn, or be empty: created just before a
	// crash (the next append makes it again). Once an empty one is removed
	// the one before is the newest, and its last event is read from it,
	// not taken from the removed one's name: events may have been dropped
	// between them.
	var newest uint64
	for len(firsts) > 0 {
		first := firsts[len(firsts)-1]
		name := filepath.Join(dir, segmentName(first))
		if newest, err = s.recoverSegment(name, first); err != nil {
			return err
		}
		if newest >= first {
			break
		}
		if err := os.Remove(name); err != nil {
			return fmt.Errorf("filestore: %w", err)
		}
		firsts = firsts[:len(firsts)-1]
	}
	for i, first := range firsts {
		last := newest
		if i < len(firsts)-1 {
			last = firsts[i+1] - 1
		}
		l.segments = append(l.segments, segment{first, last})
	}
	l.opened = true
	return nil
}

// recoverSegment returns the Seq of the last whole line of the segment
// file name, whose first event is first, 0 if it has none, and cuts off a
// torn line after it.
func (s *Store) recoverSegment(name string, first uint64) (uint64, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return 0, fmt.Errorf("filestore: %w", err)
	}
	good, last := 0, uint64(0)
	for off := 0; off < len(data); {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break
		}
		e, ok := parseEventLine(data[off:off+i], first, last, good > 0)
		if !ok {
			// Only the last write can be torn: a whole event after this
			// line was written after it was whole, so it was damaged
			// since, and cutting here would drop acknowledged events.
			for rest := data[off+i+1:]; ; {
				j := bytes.IndexByte(rest, '\n')
				if j < 0 {
					break
				}
				if e, ok := parseEventLine(rest[:j], first, last, good > 0); ok {
					return 0, fmt.Errorf("%w %s: the event line at offset %d is damaged, but whole events follow it (event %d at offset %d)",
						ErrCorrupt, name, off, e.Seq, len(data)-len(rest))
				}
				rest = rest[j+1:]
			}
			break
		}
		off += i + 1
		good, last = off, e.Seq
	}
	if good < len(data) {
		if err := os.Truncate(name, int64(good)); err != nil {
			return 0, fmt.Errorf("filestore: cutting a torn event off %s: %w", name, err)
		}
	}
	return last, nil
}

// parseEventLine decodes line, a line of the segment whose first event is
// first, and reports whether it is a whole event: one that parses, with
// data, numbered at least first and, if after is set, above prev. A
// damaged line may still parse (an altered key loses the seq); it is
// damage all the same.
func parseEventLine(line []byte, first, prev uint64, after bool) (eventLine, bool) {
	var e eventLine
	if json.Unmarshal(line, &e) != nil || len(e.Data) == 0 || e.Seq < first || after && e.Seq <= prev {
		return e, false
	}
	return e, true
}

// closeEvents closes the newest segment. Called by Close.
func (s *Store) closeEvents() error {
	l := &s.events
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := datasync(l.file)
	if cerr := l.file.Close(); err == nil {
		err = cerr
	}
	l.file = nil
	return err
}

var _ store.EventLog = (*Store)(nil)
