package filestore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
)

// TestEventLog_LineThatDecodesWrong: a damaged line of the newest segment
// may still parse as JSON, with its seq lost (a key altered) or changed.
// Such a line is damage like one that does not parse: as the last line it
// is cut, and the acknowledged events before it stay (the segment is not
// removed as if it were empty); with whole events after it, the log
// reports ErrCorrupt and leaves the file as it is.
func TestEventLog_LineThatDecodesWrong(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		line    int // the line damaged, from 0
		from    string
		to      string
		corrupt bool
	}{
		{"last line, seq key altered", 19, `"seq"`, `"seX"`, false},
		{"last line, seq out of order", 19, `"seq":20`, `"seq":2 `, false},
		{"middle line, seq key altered", 4, `"seq"`, `"seX"`, true},
		{"middle line, seq out of order", 4, `"seq":5`, `"seq":9`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg, lines := writtenSegment(t, 20)
			if !bytes.Contains(lines[tc.line], []byte(tc.from)) {
				t.Fatalf("line %d is %q", tc.line, lines[tc.line])
			}
			lines[tc.line] = bytes.Replace(lines[tc.line], []byte(tc.from), []byte(tc.to), 1)
			damaged := bytes.Join(lines, nil)
			if err := os.WriteFile(seg, damaged, 0o600); err != nil {
				t.Fatal(err)
			}

			s := open(t, dir, Options{})
			defer closeStore(t, s)
			first, last, err := s.EventBounds(ctx)
			if tc.corrupt {
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("EventBounds with line %d damaged = %d, %d, %v; want an error wrapping ErrCorrupt", tc.line, first, last, err)
				}
				if got, err := os.ReadFile(seg); err != nil || !bytes.Equal(got, damaged) {
					t.Errorf("the damaged segment was changed: %d bytes now, %d before (%v)", len(got), len(damaged), err)
				}
				return
			}
			if err != nil || first != 1 || last != 19 {
				t.Errorf("EventBounds with the last of 20 lines damaged = %d, %d, %v; want 1, 19 (events 1..19 were acknowledged)", first, last, err)
			}
			got, err := s.ReadEvents(ctx, 0, 100)
			if err != nil || len(got) != 19 || got[18].Seq != 19 {
				t.Errorf("ReadEvents = %d events, %v; want events 1..19", len(got), err)
			}
		})
	}
}

// TestEventLog_ReadDamagedOlderSegment: a line of an older segment (which
// Open does not check) damaged so that it still parses, with its seq or
// data lost, is reported by ReadEvents with an error wrapping ErrCorrupt,
// not returned as an event without data nor silently skipped.
func TestEventLog_ReadDamagedOlderSegment(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, from, to string }{
		{"seq key altered", `"seq"`, `"seX"`},
		{"data key altered", `"data"`, `"dXta"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg, lines := writtenSegment(t, eventsPerSegment+5)
			lines[10] = bytes.Replace(lines[10], []byte(tc.from), []byte(tc.to), 1)
			if err := os.WriteFile(seg, bytes.Join(lines, nil), 0o600); err != nil {
				t.Fatal(err)
			}
			s := open(t, dir, Options{})
			defer closeStore(t, s)
			got, err := s.ReadEvents(ctx, 1, 20)
			if !errors.Is(err, ErrCorrupt) {
				var seqs []uint64
				for _, e := range got {
					seqs = append(seqs, e.Seq)
				}
				t.Errorf("ReadEvents over a damaged line 11 = %v (event 11's data %q), %v; want an error wrapping ErrCorrupt", seqs, got[min(10, len(got)-1)].Data, err)
			}
		})
	}
}

// TestEventLog_BatchOutOfOrderRefused: a batch whose Seqs do not ascend is
// refused whole, before anything is written: kept, its events would be
// read back out of order, and taken for damage when the log is opened.
func TestEventLog_BatchOutOfOrderRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	defer closeStore(t, s)
	if err := s.AppendEvents(ctx, eventBatch(1, 3)); err != nil {
		t.Fatal(err)
	}
	bad := append(eventBatch(5, 6), eventBatch(4, 4)...)
	if err := s.AppendEvents(ctx, bad); err == nil {
		t.Errorf("AppendEvents of events 5, 6, 4 succeeded; want an error")
	}
	if first, last, err := s.EventBounds(ctx); err != nil || first != 1 || last != 3 {
		t.Errorf("EventBounds after the refused batch = %d, %d, %v; want 1, 3", first, last, err)
	}
	if err := s.AppendEvents(ctx, eventBatch(4, 6)); err != nil {
		t.Fatalf("appending 4..6 after the refused batch: %v", err)
	}
	got, err := s.ReadEvents(ctx, 0, 10)
	if err != nil || len(got) != 6 || got[5].Seq != 6 {
		t.Errorf("ReadEvents = %v, %v; want events 1..6", got, err)
	}
}

// TestEventLog_FailedSyncKeepsNothing: under SyncEveryRecord an append
// whose sync fails returns an error, and its events must not stay in the
// log: a society learns from EventBounds what the store kept and does not
// write those events again, though after a failed sync they may never
// reach the disk. The batch is cut off, and written again by the retry.
func TestEventLog_FailedSyncKeepsNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if err := s.AppendEvents(ctx, eventBatch(1, 3)); err != nil {
		t.Fatal(err)
	}
	syncEvents = func(*os.File) error { return errors.New("injected sync failure") }
	err := s.AppendEvents(ctx, eventBatch(4, 5))
	syncEvents = datasync
	if err == nil {
		t.Fatal("AppendEvents with a failing sync succeeded")
	}
	if first, last, err := s.EventBounds(ctx); err != nil || first != 1 || last != 3 {
		t.Errorf("EventBounds after a failed sync of events 4, 5 = %d, %d, %v; want 1, 3 (4 and 5 were not made durable)", first, last, err)
	}
	if err := s.AppendEvents(ctx, eventBatch(4, 5)); err != nil {
		t.Fatalf("appending 4, 5 again: %v", err)
	}
	closeStore(t, s)
	s = open(t, dir, Options{})
	defer closeStore(t, s)
	got, err := s.ReadEvents(ctx, 0, 10)
	if err != nil || len(got) != 5 || got[4].Seq != 5 {
		t.Errorf("ReadEvents after reopening = %v, %v; want events 1..5", got, err)
	}
}
