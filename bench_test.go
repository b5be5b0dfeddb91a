package agentsociety_test

import (
	"context"
	"encoding/json"
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
