package filestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"agentsociety/store"
	"agentsociety/store/storetest"
)

func TestEventLogConformance(t *testing.T) {
	for _, v := range variants[:2] { // the event log does not depend on compaction
		t.Run(v.name, func(t *testing.T) {
			storetest.RunEventLog(t, func(t *testing.T) store.EventLog {
				s := open(t, t.TempDir(), v.opts)
				t.Cleanup(func() { closeStore(t, s) })
				return s
			})
		})
	}
}

// TestEventLogReopen checks that events survive a reopening, that a torn
// last line (a crash mid-write) is cut off, and that appends go on after
// the last whole event.
func TestEventLogReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	batch := func(from, to uint64) []store.Event {
		var out []store.Event
		for seq := from; seq <= to; seq++ {
			out = append(out, store.Event{Seq: seq, Data: []byte(`{"k":"x"}`)})
		}
		return out
	}
	if err := s.AppendEvents(ctx, batch(1, eventsPerSegment+10)); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)

	// A crash mid-write leaves half a line.
	seg := filepath.Join(dir, eventsName, segmentName(eventsPerSegment+1))
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":1035,"da`)
	f.Close()

	s = open(t, dir, Options{})
	first, last, err := s.EventBounds(ctx)
	if err != nil || first != 1 || last != eventsPerSegment+10 {
		t.Fatalf("EventBounds after reopening = %d, %d, %v; want 1, %d", first, last, err, eventsPerSegment+10)
	}
	if err := s.AppendEvents(ctx, batch(eventsPerSegment+11, eventsPerSegment+12)); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadEvents(ctx, eventsPerSegment+9, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Seq != eventsPerSegment+9 || got[3].Seq != eventsPerSegment+12 {
		t.Fatalf("after reopening read %d events from %d: %+v", len(got), eventsPerSegment+9, got)
	}
	closeStore(t, s)
}

// TestEventLogDataAsGiven: an event's data on one line is kept byte for
// byte; data over several lines (JSON may hold newlines between its
// tokens) is kept on one line, the same value; data that is not JSON is
// refused, and nothing of its batch is written.
func TestEventLogDataAsGiven(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	given := []store.Event{
		{Seq: 1, Data: []byte(`{"text":"a <b> & \"c\"","n":1.50}`)},
		{Seq: 2, Data: []byte("{\n  \"text\": \"two\\nlines\"\n}")},
		{Seq: 3, Data: []byte(` "padded" `)},
	}
	if err := s.AppendEvents(ctx, given); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{[]byte(`{"text":`), []byte(`{} {}`), []byte("  ")} {
		if err := s.AppendEvents(ctx, []store.Event{{Seq: 4, Data: []byte(`{}`)}, {Seq: 5, Data: bad}}); err == nil {
			t.Errorf("AppendEvents took data %q, which is not one JSON value", bad)
		}
	}
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	got, err := s.ReadEvents(ctx, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"text":"a <b> & \"c\"","n":1.50}`, `{"text":"two\nlines"}`, `"padded"`}
	if len(got) != len(want) {
		t.Fatalf("read %d events after reopening, want %d: %v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || string(e.Data) != want[i] {
			t.Errorf("event %d: seq %d data %s, want seq %d data %s", i, e.Seq, e.Data, i+1, want[i])
		}
	}
}

// eventBatch returns the events from..to, each with data {"k":"x"}.
func eventBatch(from, to uint64) []store.Event {
	var out []store.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, store.Event{Seq: seq, Data: []byte(`{"k":"x"}`)})
	}
	return out
}

// TestEventLog_DamagedLineIsReported: a line of the newest segment damaged
// since it was written (bit rot, a stray write) with whole events after it
// is not a torn tail: opening the log must not cut the acknowledged events
// that follow it, nor remove the segment; it reports ErrCorrupt and leaves
// the file as it is, as Open does for the journal.
func TestEventLog_DamagedLineIsReported(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		line int // the line damaged, from 0
	}{
		{"middle line", 4},
		{"first line", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg, lines := writtenSegment(t, 20)
			lines[tc.line][0] = '#' // one byte damaged: the line no longer parses
			damaged := bytes.Join(lines, nil)
			if err := os.WriteFile(seg, damaged, 0o600); err != nil {
				t.Fatal(err)
			}

			s := open(t, dir, Options{})
			defer closeStore(t, s)
			first, last, err := s.EventBounds(ctx)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("EventBounds with line %d of 20 damaged = %d, %d, %v; want an error wrapping ErrCorrupt (events %d..20 were acknowledged)",
					tc.line, first, last, err, tc.line+2)
			}
			if got, err := os.ReadFile(seg); err != nil || !bytes.Equal(got, damaged) {
				t.Errorf("the damaged segment was changed: %d bytes now, %d before (%v)", len(got), len(damaged), err)
			}
		})
	}
}

// TestEventLog_BoundsAfterEmptyNewSegment: a crash between creating a
// segment and writing its first event leaves it empty, and Open removes it.
// When the event it was made for came after a gap, the previous segment's
// newest event is not the one before the removed segment's first:
// EventBounds must say which event is the newest kept.
func TestEventLog_BoundsAfterEmptyNewSegment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if err := s.AppendEvents(ctx, eventBatch(1, eventsPerSegment)); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	// The society dropped events 1025..1999; the next segment, for 2000,
	// was created and the process killed before the write.
	empty := filepath.Join(dir, eventsName, segmentName(2000))
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, Options{})
	defer closeStore(t, s)
	first, last, err := s.EventBounds(ctx)
	if err != nil || first != 1 || last != eventsPerSegment {
		t.Errorf("EventBounds = %d, %d, %v; want 1, %d (the newest event kept)", first, last, err, eventsPerSegment)
	}
	got, err := s.ReadEvents(ctx, eventsPerSegment, 10)
	if err != nil || len(got) != 1 || got[0].Seq != eventsPerSegment {
		t.Fatalf("ReadEvents(%d) = %v, %v; want the newest event alone", eventsPerSegment, got, err)
	}
}

// TestEventLog_NewSegmentLeftOver: a segment file that a failed start of
// a new segment left behind, empty and unknown to the log, does not stop
// the appends that start that segment again.
func TestEventLog_NewSegmentLeftOver(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	defer closeStore(t, s)
	if err := s.AppendEvents(ctx, eventBatch(1, eventsPerSegment)); err != nil {
		t.Fatal(err)
	}
	next := uint64(eventsPerSegment + 1)
	if err := os.WriteFile(filepath.Join(dir, eventsName, segmentName(next)), nil, fileMode); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, eventBatch(next, next+1)); err != nil {
		t.Fatalf("appending the first events of a segment whose file was left empty: %v", err)
	}
	got, err := s.ReadEvents(ctx, next-1, 10)
	if err != nil || len(got) != 3 || got[2].Seq != next+1 {
		t.Fatalf("ReadEvents from %d = %v, %v; want %d to %d", next-1, got, err, next-1, next+1)
	}
}

// writtenSegment has a store in a new directory append events 1 to n and
// close, and returns the directory, the path of the first segment of the
// event log, and its lines, each with its line break.
func writtenSegment(t *testing.T, n uint64) (dir, seg string, lines [][]byte) {
	t.Helper()
	dir = t.TempDir()
	s := open(t, dir, Options{})
	if err := s.AppendEvents(context.Background(), eventBatch(1, n)); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	seg = filepath.Join(dir, eventsName, segmentName(1))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	return dir, seg, bytes.SplitAfter(data, []byte("\n"))
}
