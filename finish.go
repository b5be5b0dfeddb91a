package agentsociety

import (
	"context"
	"log/slog"
	"sync"

	"agentsociety/store"
)

// Finishing. The record that a message's handling ended is written behind
// when it is all a turn records (a code-driven agent's turn, or a model
// turn that added nothing to the history): the drainer goes on to its
// agent's next message at once, and the records of the messages handled
// meanwhile go to the store together, as one change, from the finisher's
// one goroutine. A crash before they are written has those messages
// delivered again, as a crash during their handling would: delivery is at
// least once. Close writes every record before it returns.

// maxFinishBatch bounds the messages one change finishes, so that a
// change stays small for any store.
const maxFinishBatch = 256

// maxFinishTries is how many times in a row the finisher tries a change
// the store fails before it gives the change up.
const maxFinishTries = 8

// finisher writes behind the records of messages whose handling ended. It
// is safe for concurrent use. Its goroutine, the one besides the event
// log's writer that s.wg does not count, starts in New and stops in Close
// once every drainer has (see close).
type finisher struct {
	store store.Store
	log   *slog.Logger

	failures int // the failed tries of the change at the queue's front; run's goroutine only

	mu  sync.Mutex
	ids []string // handled, not yet written
	// carried holds, by agent, the messages whose end failed to be
	// recorded with the agent's history: the agent's next history record
	// carries them (see Society.record).
	carried map[string][]string

	wake    chan struct{} // has a value when ids may have grown
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when the goroutine has written all and ended
}

func newFinisher(st store.Store, log *slog.Logger) *finisher {
	return &finisher{store: st, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// add queues the record that message id was handled.
func (f *finisher) add(id string) {
	f.mu.Lock()
	f.ids = append(f.ids, id)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// carry keeps ids, messages of agent whose end failed to be recorded with
// its history, for the agent's next history record.
func (f *finisher) carry(agent string, ids []string) {
	if len(ids) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.carried == nil {
		f.carried = make(map[string][]string)
	}
	f.carried[agent] = ids
}

// takeCarried returns, and forgets, the messages of agent that carry kept.
func (f *finisher) takeCarried(agent string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := f.carried[agent]
	delete(f.carried, agent)
	return ids
}

// run writes what add queues until close; then it writes the rest and
// ends.
func (f *finisher) run() {
	defer close(f.stopped)
	ctx := context.Background() // the last records are written even as Close gives up waiting
	for stopping := false; !stopping; {
		select {
		case <-f.wake:
		case <-f.stop:
			stopping = true
		}
		f.write(ctx, false)
	}
	f.write(ctx, true) // what failed above
}

// write writes every record queued, maxFinishBatch to a change. A change
// that fails goes back to the front of the queue, for the next write: the
// one the next message handled wakes, or the last, as the society closes.
// A change is given up after maxFinishTries failures in a row, so that one
// the store keeps refusing holds up no other, and the last write gives up
// every change that fails: their messages are delivered again when the
// society reopens. The queue cannot grow far while the store fails: on a
// durable store, the messages themselves are accepted only once the store
// has them.
func (f *finisher) write(ctx context.Context, last bool) {
	for {
		f.mu.Lock()
		n := min(len(f.ids), maxFinishBatch)
		ids := f.ids[:n:n]
		f.ids = f.ids[n:]
		f.mu.Unlock()
		if n == 0 {
			return
		}
		err := f.store.Apply(ctx, store.Change{Finished: ids})
		if err == nil {
			f.failures = 0
			continue
		}
		f.failures++
		if last || f.failures >= maxFinishTries {
			f.failures = 0
			f.log.LogAttrs(ctx, slog.LevelError, "recording handled messages failed; they are delivered again when the society reopens",
				slog.Int("messages", n), slog.String("err", err.Error()))
			if last {
				continue
			}
			return
		}
		f.mu.Lock()
		f.ids = append(ids, f.ids...)
		f.mu.Unlock()
		f.log.LogAttrs(ctx, slog.LevelWarn, "recording handled messages failed; it is tried again with the next",
			slog.Int("messages", n), slog.String("err", err.Error()))
		return
	}
}

// closing reports whether close has begun: what add queues then may never
// be written.
func (f *finisher) closing() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

// close stops the goroutine once it has written every record queued. Called
// once, when no drainer runs.
func (f *finisher) close() {
	close(f.stop)
	<-f.stopped
}
