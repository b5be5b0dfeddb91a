package filestore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"agentsociety/store"
)

// BenchmarkApply measures the hot path a message takes through the store,
// as store.BenchmarkMemoryApply does: one Apply accepting it and one Apply
// finishing it per op. "parallel" runs the ops from GOMAXPROCS goroutines
// (times -cpu), where SyncEveryRecord's group commit shares syncs.
func BenchmarkApply(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"SyncEveryRecord", Options{}},
		{"SyncBatched", Options{Sync: SyncBatched}},
	} {
		msg := store.Message{
			From:    "agent-a",
			To:      "agent-b",
			TaskID:  "task-1",
			Type:    "text",
			Payload: json.RawMessage(`{"text":"hello"}`),
			SentAt:  time.Now(),
		}
		b.Run(mode.name, func(b *testing.B) {
			s := open(b, b.TempDir(), mode.opts)
			defer closeStore(b, s)
			ctx := context.Background()
			accept := store.Change{Accepted: []store.Message{msg}}
			finish := store.Change{Finished: []string{""}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("m-%d", i)
				accept.Accepted[0].ID, accept.Accepted[0].Seq = id, uint64(i+1)
				finish.Finished[0] = id
				if err := s.Apply(ctx, accept); err != nil {
					b.Fatal(err)
				}
				if err := s.Apply(ctx, finish); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/parallel", func(b *testing.B) {
			s := open(b, b.TempDir(), mode.opts)
			defer closeStore(b, s)
			ctx := context.Background()
			var seq atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				accept := store.Change{Accepted: []store.Message{msg}}
				finish := store.Change{Finished: []string{""}}
				for pb.Next() {
					n := seq.Add(1)
					id := fmt.Sprintf("m-%d", n)
					accept.Accepted[0].ID, accept.Accepted[0].Seq = id, n
					finish.Finished[0] = id
					if err := s.Apply(ctx, accept); err != nil {
						b.Fatal(err)
					}
					if err := s.Apply(ctx, finish); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.StopTimer()
			s.syncMu.Lock()
			if s.syncs > 0 {
				b.ReportMetric(float64(2*b.N)/float64(s.syncs), "applies/sync")
			}
			s.syncMu.Unlock()
		})
	}
}
