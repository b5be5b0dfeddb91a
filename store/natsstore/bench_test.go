package natsstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"agentsociety/store"
	"agentsociety/store/filestore"
	"agentsociety/store/natsstore"
	"agentsociety/store/natsstore/natstest"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkApply measures the two changes a society makes most, on this
// store and, as the baseline in the same run, on filestore with its
// default SyncEveryRecord: "message" is one Apply accepting a message and
// one finishing it (a write each), "turn" one Apply appending two
// messages to a history (an atomic batch of three writes here). The NATS
// server runs in the process, so cpu-ns/op counts its work too.
// "natsstore-memory" keeps the bucket in the server's memory, where the
// server also stages atomic batches: on a stream of one file-stored
// replica it stages each batch in files of its own and syncs them, which
// is most of the cost of "natsstore/turn".
func BenchmarkApply(b *testing.B) {
	url := natstest.Server(b)
	stores := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"natsstore", func(b *testing.B) store.Store { return open(b, url, natsstore.Options{}) }},
		{"natsstore-memory", func(b *testing.B) store.Store {
			return open(b, url, natsstore.Options{Storage: jetstream.MemoryStorage})
		}},
		{"filestore", func(b *testing.B) store.Store {
			s, err := filestore.Open(b.TempDir(), filestore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}},
	}
	msg := store.Message{From: "agent-a", To: "agent-b", TaskID: "task-1", Type: "text",
		Payload: json.RawMessage(`{"text":"hello"}`), SentAt: time.Now()}
	turn := []json.RawMessage{json.RawMessage(`{"role":"user","content":"hello"}`), json.RawMessage(`{"role":"assistant","content":"hi"}`)}
	for _, st := range stores {
		b.Run(st.name+"/message", func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			accept := store.Change{Accepted: []store.Message{msg}}
			finish := store.Change{Finished: []string{""}}
			defer cpu(b)()
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
		b.Run(st.name+"/turn", func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			c := store.Change{HistoryAppends: []store.HistoryAppend{{AgentID: "a", Messages: turn}}}
			defer cpu(b)()
			for b.Loop() {
				if err := s.Apply(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpu starts measuring the process's CPU time and returns the function
// that reports it per op as cpu-ns/op.
func cpu(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRemove measures a removal on stores of growing size: each op
// removes ten agents, with their registries and their entries in root's,
// and adds them again (two Applies). Its cost follows what it removes,
// not the size of the store.
func BenchmarkRemove(b *testing.B) {
	url := natstest.Server(b)
	for _, n := range []int{1000, 30000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			s := open(b, url, natsstore.Options{Storage: jetstream.MemoryStorage})
			ctx := context.Background()
			at := time.Now()
			records := func(from, to int) store.Change {
				var c store.Change
				for i := from; i < to; i++ {
					id := fmt.Sprint("a", i)
					c.Agents = append(c.Agents, store.Agent{ID: id, RoleID: "r", ParentID: "root", Status: "idle", CreatedAt: at})
					c.Contacts = append(c.Contacts,
						store.ContactEntry{Owner: id, Contact: store.Contact{ID: "root", Role: "root", AddedAt: at}},
						store.ContactEntry{Owner: "root", Contact: store.Contact{ID: id, Role: "r", AddedAt: at}})
				}
				return c
			}
			for i := 0; i < n; i += 300 {
				if err := s.Apply(ctx, records(i, min(i+300, n))); err != nil {
					b.Fatal(err)
				}
			}
			defer cpu(b)()
			for i := 0; b.Loop(); i++ {
				from := (i * 10) % n
				add := records(from, from+10)
				var r store.Removal
				for _, a := range add.Agents {
					r.Agents = append(r.Agents, a.ID)
					r.Contacts = append(r.Contacts, store.ContactKey{Owner: "root", ID: a.ID})
				}
				if err := s.Apply(ctx, store.Change{Remove: r}); err != nil {
					b.Fatal(err)
				}
				if err := s.Apply(ctx, add); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
