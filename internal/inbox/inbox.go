// Package inbox is what a host reads messages to user from: callbacks, an
// inbox of the messages no one has claimed, and the callers waiting for
// one. A society's user endpoint and a cluster node's share it.
package inbox

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// Box holds the callbacks, the unclaimed messages of type T, oldest first,
// and the waiters. It is safe for concurrent use. Filters run under its
// lock, and a filter that panics does not wedge it: the panic becomes an
// error for the call whose filter it is.
type Box[T any] struct {
	limit    int
	panicked func(m T, r any) error // the error a filter's panic on m becomes
	closed   func() error           // the error a call gets once the box is closed

	mu      sync.Mutex
	subs    []*sub[T]
	items   []T
	waiters []*waiter[T]

	// shut is set, and done closed, by Close, without mu: a host filter
	// that blocks under mu must not keep Close waiting.
	shut atomic.Bool
	once sync.Once
	done chan struct{}
}

// sub is a registered callback.
type sub[T any] struct {
	f   func(T)
	off atomic.Bool // set by its unregister, before it returns
}

type waiter[T any] struct {
	filter func(T) bool
	ch     chan claim[T] // buffered(1): the message it claimed, or its filter's panic
}

type claim[T any] struct {
	m   T
	err error
}

// New returns a box that keeps at most limit unclaimed messages. panicked
// makes the error a filter's panic r on message m becomes; closed makes
// the error of a call on a closed box.
func New[T any](limit int, panicked func(m T, r any) error, closed func() error) *Box[T] {
	return &Box[T]{limit: limit, panicked: panicked, closed: closed, done: make(chan struct{})}
}

// Subscribe registers f as a callback and returns the function that
// unregisters it. Once unregister has returned, f is not called again
// (a call under way may still run on); unregister may be called from f.
func (b *Box[T]) Subscribe(f func(T)) (unregister func()) {
	p := &sub[T]{f: f}
	b.mu.Lock()
	b.subs = append(b.subs, p)
	b.mu.Unlock()
	return func() {
		p.off.Store(true)
		b.mu.Lock()
		defer b.mu.Unlock()
		if i := slices.Index(b.subs, p); i >= 0 {
			b.subs = slices.Delete(b.subs, i, i+1)
		}
	}
}

// Call calls the callbacks registered now with m, in the order they were
// registered, each through call (which may contain its panic), without the
// box's lock. A callback unregistered before its turn is skipped. Call
// returns how many callbacks it called.
func (b *Box[T]) Call(m T, call func(f func(T), m T)) (called int) {
	for _, p := range b.registered() {
		if !p.off.Load() {
			call(p.f, m)
			called++
		}
	}
	return called
}

// registered returns the callbacks registered now.
func (b *Box[T]) registered() []*sub[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.subs)
}

// Put offers m to the waiters in the order they came: the first whose
// filter matches claims it, and one whose filter panics gets the error and
// m goes on. Unclaimed, m is kept, and the oldest message is dropped when
// the inbox is full. Put reports whether m was claimed, the message
// dropped if any, and the errors the filters' panics became.
func (b *Box[T]) Put(m T) (claimed bool, dropped *T, panics []error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i < len(b.waiters) && !claimed; {
		w := b.waiters[i]
		ok, err := b.match(w.filter, m)
		switch {
		case err != nil:
			w.ch <- claim[T]{err: err}
			panics = append(panics, err)
		case ok:
			w.ch <- claim[T]{m: m}
			claimed = true
		default:
			i++
			continue
		}
		b.waiters = slices.Delete(b.waiters, i, i+1)
	}
	if !claimed {
		if len(b.items) >= b.limit && len(b.items) > 0 {
			d := b.items[0]
			dropped, b.items = &d, b.items[1:]
		}
		b.items = append(b.items, m)
	}
	return claimed, dropped, panics
}

// Take returns the oldest message in the inbox that filter matches (nil
// matches any), or waits for one that Put offers. fromInbox says which
// (for a panic of filter: whether it was on a message of the inbox, rather
// than one Put offered, whose caller has the error too). It returns
// ctx.Err() when ctx ends first, the closed error once the box is closed,
// and the panicked error when filter panics.
func (b *Box[T]) Take(ctx context.Context, filter func(T) bool) (m T, fromInbox bool, err error) {
	b.mu.Lock()
	for i, x := range b.items {
		ok, err := b.match(filter, x)
		if err != nil {
			b.mu.Unlock()
			return m, true, err
		}
		if ok {
			b.items = slices.Delete(b.items, i, i+1)
			b.mu.Unlock()
			return x, true, nil
		}
	}
	if b.shut.Load() {
		b.mu.Unlock()
		return m, false, b.closed()
	}
	w := &waiter[T]{filter: filter, ch: make(chan claim[T], 1)}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	select {
	case c := <-w.ch:
		return c.m, false, c.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-b.done:
		err = b.closed()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.waiters, w); i >= 0 {
		b.waiters = slices.Delete(b.waiters, i, i+1)
		return m, false, err
	}
	// A message, or the filter's panic, was handed to w just as it gave
	// up: return it rather than lose it.
	c := <-w.ch
	return c.m, false, c.err
}

// Items returns the messages in the inbox, oldest first.
func (b *Box[T]) Items() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.items)
}

// Close makes every waiting and later Take return the closed error once
// the inbox has no message for it. It is idempotent.
func (b *Box[T]) Close() {
	b.once.Do(func() {
		b.shut.Store(true)
		close(b.done)
	})
}

// match runs filter on m; a nil filter matches any message, and a panic is
// returned as the error panicked makes of it.
func (b *Box[T]) match(filter func(T) bool, m T) (ok bool, err error) {
	if filter == nil {
		return true, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = b.panicked(m, r)
		}
	}()
	return filter(m), nil
}
