package filestore

import (
	"context"
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
