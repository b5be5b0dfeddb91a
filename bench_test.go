package agentsociety_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	as "agentsociety"
	"agentsociety/store"
)

// benchPairs is the number of agent pairs (or goroutine pairs) that bounce a
// message back and forth in the routing benchmarks.
const benchPairs = 64

// benchPayload is the payload every routed message carries.
var benchPayload = json.RawMessage(`{"text":"ping"}`)

// benchPayloadAny is benchPayload already boxed, so that a reply does not
// allocate to put it in Outgoing.Payload.
var benchPayloadAny any = benchPayload

// BenchmarkRoute measures messages delivered per second between code-driven
// agents on the default in-memory store: benchPairs pairs of agents each
// bounce one message until b.N deliveries in all have happened.
func BenchmarkRoute(b *testing.B) {
	b.ReportMetric(routePairs(b, nil), "msgs/s") // messages log at Debug: dropped
}

// routePairs runs BenchmarkRoute's exchange on st (nil: the default
// in-memory store) and returns the rate of delivered messages.
func routePairs(b *testing.B, st store.Store) float64 {
	ctx := context.Background()
	s := newSociety(b, as.Config{Store: st, Logger: quiet})
	lead, roleID := hostLead(b, s, "route", "pinger")

	var (
		armed   atomic.Bool
		warm    sync.WaitGroup
		count   atomic.Int64
		budget  = int64(b.N)
		done    = make(chan struct{})
		failure = make(chan error, 1)
	)
	pong := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
		if !armed.Load() {
			warm.Done()
			return nil
		}
		n := count.Add(1)
		if n == budget {
			close(done)
		}
		if n >= budget {
			return nil
		}
		if _, err := self.Send(ctx, as.Outgoing{To: m.From, Payload: benchPayloadAny}); err != nil {
			select {
			case failure <- err:
			default:
			}
		}
		return nil
	})
	var left, right [benchPairs]*as.Actor
	for i := range benchPairs {
		for _, side := range []*[benchPairs]*as.Actor{&left, &right} {
			a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: roleID, Brief: validBrief(), Behavior: pong})
			if err != nil {
				b.Fatal(err)
			}
			if side[i], err = s.Actor(a.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	warm.Add(2 * benchPairs)
	for i := range benchPairs {
		if _, err := left[i].Send(ctx, as.Outgoing{To: right[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
		if _, err := right[i].Send(ctx, as.Outgoing{To: left[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
	}
	warm.Wait()
	armed.Store(true)

	b.ReportAllocs()
	b.ResetTimer()
	for i := range benchPairs {
		if _, err := left[i].Send(ctx, as.Outgoing{To: right[i].ID(), Payload: benchPayloadAny}); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-done:
	case err := <-failure:
		b.Fatal(err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("delivered %d of %d messages", count.Load(), b.N)
	}
	b.StopTimer()
	return float64(b.N) / b.Elapsed().Seconds()
}

// benchMsg is what the baseline's goroutines pass around: about what a
// message between agents needs.
type benchMsg struct {
	from, to string
	seq      uint64
	payload  json.RawMessage
}

// BenchmarkRouteBaseline is BenchmarkRoute's shape with nothing but
// goroutines and buffered channels: benchPairs pairs of goroutines bounce a
// message struct until b.N deliveries in all have happened.
func BenchmarkRouteBaseline(b *testing.B) {
	var (
		count  atomic.Int64
		budget = int64(b.N)
		done   = make(chan struct{})
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	run := func(self string, in <-chan benchMsg, out chan<- benchMsg) {
		for {
			select {
			case m := <-in:
				n := count.Add(1)
				if n == budget {
					close(done)
				}
				if n >= budget {
					continue
				}
				// One message per pair is in flight, so out always has room.
				out <- benchMsg{from: self, to: m.from, seq: m.seq + 1, payload: benchPayload}
			case <-stop:
				return
			}
		}
	}
	var kick [benchPairs]chan benchMsg
	for i := range benchPairs {
		l, r := make(chan benchMsg, 1), make(chan benchMsg, 1)
		ln, rn := "l"+strconv.Itoa(i), "r"+strconv.Itoa(i)
		wg.Go(func() { run(ln, l, r) })
		wg.Go(func() { run(rn, r, l) })
		kick[i] = r
	}

	b.ReportAllocs()
	b.ResetTimer()
	for i := range benchPairs {
		kick[i] <- benchMsg{from: "l" + strconv.Itoa(i), to: "r" + strconv.Itoa(i), payload: benchPayload}
	}
	<-done
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// The idle-agent benchmarks spawn agents under spawnParents parents (root's
// children on as many tasks), on a society that holds up to spawnScale of
// them.
const (
	spawnScale   = 100_000
	spawnParents = 8
)

// spawnHeapProfile names a file to which BenchmarkSpawnIdle/heap writes a
// heap profile while its spawnScale agents are alive, for an in-use
// breakdown per allocation site (go tool pprof -sample_index=inuse_space).
// Run with -memprofilerate=1 for exact numbers.
var spawnHeapProfile = flag.String("spawnheapprofile", "", "write a heap profile of spawnScale idle agents to this file")

// spawnSociety starts a society for spawnScale idle agents and returns it
// with spawnParents parents and the role each may spawn on.
func spawnSociety(b *testing.B) (*as.Society, []*as.Actor, []string) {
	s, err := as.New(context.Background(), as.Config{Logger: quiet, MaxAgents: 200_000})
	if err != nil {
		b.Fatal(err)
	}
	parents := make([]*as.Actor, spawnParents)
	roles := make([]string, spawnParents)
	for i := range spawnParents {
		parents[i], roles[i] = hostLead(b, s, "idle-"+strconv.Itoa(i), "idle")
	}
	return s, parents, roles
}

// BenchmarkSpawnIdle measures spawning idle agents: "spawn" is the time per
// spawn on a society filled with up to spawnScale agents (a new society
// every spawnScale spawns); "heap" spawns spawnScale agents per iteration
// and reports the live heap each one adds.
func BenchmarkSpawnIdle(b *testing.B) {
	ctx := context.Background()
	brief := smallBrief()
	briefJSON, err := json.Marshal(brief)
	if err != nil {
		b.Fatal(err)
	}

	b.Run("spawn", func(b *testing.B) {
		b.ReportAllocs()
		var s *as.Society
		var parents []*as.Actor
		var roles []string
		for i := range b.N {
			if i%spawnScale == 0 {
				b.StopTimer()
				if s != nil {
					closeSociety(b, s)
				}
				s, parents, roles = spawnSociety(b)
				b.StartTimer()
			}
			p := i % spawnParents
			if _, _, err := parents[p].SpawnAgent(ctx, as.SpawnSpec{RoleID: roles[p], Brief: brief}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		closeSociety(b, s)
	})

	b.Run("heap", func(b *testing.B) {
		var perAgent, goroutines, spawnNs float64
		for range b.N {
			b.StopTimer()
			s, parents, roles := spawnSociety(b)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			g0 := runtime.NumGoroutine()
			b.StartTimer()
			t0 := time.Now()
			for i := range spawnScale {
				p := i % spawnParents
				if _, _, err := parents[p].SpawnAgent(ctx, as.SpawnSpec{RoleID: roles[p], Brief: brief}); err != nil {
					b.Fatal(err)
				}
			}
			spawnNs = float64(time.Since(t0).Nanoseconds()) / spawnScale
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			goroutines = float64(runtime.NumGoroutine() - g0)
			perAgent = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / spawnScale
			if *spawnHeapProfile != "" {
				writeHeapProfile(b, *spawnHeapProfile)
			}
			if n := len(s.Agents()); n != spawnScale+spawnParents {
				b.Fatalf("%d agents, want %d", n, spawnScale+spawnParents)
			}
			closeSociety(b, s)
		}
		perBrief := briefHeap(brief)
		b.ReportMetric(perAgent, "B/agent")
		b.ReportMetric(perBrief, "B/brief")
		b.ReportMetric(perAgent-perBrief, "B/agent-briefs-aside")
		b.ReportMetric(float64(len(briefJSON)), "brief-json-B")
		b.ReportMetric(spawnNs, "ns/spawn")
		b.ReportMetric(goroutines, "goroutines")
	})
}

// briefHeap returns the live heap that keeping one brief costs a society:
// the copy the society keeps (the struct and its slices) and the store's
// JSON copy, measured over spawnScale of them as BenchmarkSpawnIdle measures
// agents, so that the two can be subtracted.
func briefHeap(brief *as.TaskBrief) float64 {
	kept := make([]*as.TaskBrief, spawnScale)
	encoded := make([][]byte, spawnScale)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range kept {
		c := *brief
		c.Constraints = append(make([]string, 0, len(brief.Constraints)), brief.Constraints...)
		kept[i] = &c
		j, _ := json.Marshal(brief)
		encoded[i] = append([]byte(nil), j...)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(encoded)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc) - float64(2*spawnScale*8)) / spawnScale
}

func writeHeapProfile(b *testing.B, name string) {
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}
