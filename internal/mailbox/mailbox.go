// Package mailbox is an agent's inbox: an unbounded FIFO that knows whether
// someone is draining it, so that an idle agent needs no goroutine.
package mailbox

import (
	"sync"
	"sync/atomic"
)

// Box is a FIFO queue with a drainer flag. Push reports when the caller must
// start a drainer; the drainer calls Next until it reports empty, at which
// point the flag is cleared under the same lock, so no item is ever left
// without a drainer and no two drainers run at once.
//
// A Box is safe for concurrent use. The zero value is an empty Box.
type Box[T any] struct {
	mu       sync.Mutex
	items    []T
	head     int
	draining bool
	held     T    // the item the drainer took last, while it handles it
	holding  bool // held is set
	// n is len(items) - head, kept for Len: a sender checks the length
	// of the receiver's queue on every send without taking mu.
	n atomic.Int64
}

// shrinkAbove is the capacity above which an emptied queue drops its buffer,
// so that a burst does not leave an idle agent holding memory.
const shrinkAbove = 64

// Push appends v and reports whether the caller must start a drainer.
func (b *Box[T]) Push(v T) (start bool) {
	b.mu.Lock()
	b.items = append(b.items, v)
	b.n.Add(1)
	start = !b.draining
	b.draining = true
	b.mu.Unlock()
	return start
}

// Next removes and returns the oldest item. When the queue is empty it
// returns ok false and the drainer must stop: the next Push starts a new one.
func (b *Box[T]) Next() (v T, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held, b.holding = v, false // the last one is handled
	if b.head == len(b.items) {
		b.reset()
		b.draining = false
		return v, false
	}
	v = b.items[b.head]
	var zero T
	b.items[b.head] = zero // let the item be collected
	b.head++
	b.n.Add(-1)
	b.held, b.holding = v, true
	// A queue that never empties would otherwise append past a head that
	// never comes back: move what is left to the front once the front is
	// mostly spent.
	if b.head > shrinkAbove && b.head > len(b.items)/2 {
		n := copy(b.items, b.items[b.head:])
		clear(b.items[n:])
		b.items, b.head = b.items[:n], 0
	}
	return v, true
}

// Stop ends the current drainer without emptying the queue. Items stay
// queued; the next Push starts a drainer again.
func (b *Box[T]) Stop() {
	b.mu.Lock()
	var zero T
	b.draining, b.held, b.holding = false, zero, false
	b.mu.Unlock()
}

// Held returns the item the drainer took last with Next, while it is
// still handling it: until it asks for the next one, or stops.
func (b *Box[T]) Held() (v T, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held, b.holding
}

// Busy reports whether the Box has a drainer: an item is queued, or the
// last one taken is still being handled.
func (b *Box[T]) Busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draining
}

// Items returns a copy of the queued items, oldest first.
func (b *Box[T]) Items() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]T(nil), b.items[b.head:]...)
}

// Len returns the number of queued items.
func (b *Box[T]) Len() int { return int(b.n.Load()) }

func (b *Box[T]) reset() {
	if cap(b.items) > shrinkAbove {
		b.items = nil
	} else {
		b.items = b.items[:0]
	}
	b.head = 0
}
