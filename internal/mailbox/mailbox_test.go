package mailbox

import (
	"sync"
	"testing"
)

func TestBoxFIFOAndDrainerFlag(t *testing.T) {
	var b Box[int]
	if !b.Push(1) {
		t.Fatal("first Push must ask for a drainer")
	}
	if b.Push(2) {
		t.Fatal("second Push must not ask for another drainer")
	}
	for want := 1; want <= 2; want++ {
		v, ok := b.Next()
		if !ok || v != want {
			t.Fatalf("Next = %d, %v; want %d, true", v, ok, want)
		}
	}
	if _, ok := b.Next(); ok {
		t.Fatal("Next on empty box returned ok")
	}
	if !b.Push(3) {
		t.Fatal("Push after the drainer stopped must ask for a new one")
	}
	b.Stop()
	if b.Len() != 1 {
		t.Fatalf("Len after Stop = %d, want 1", b.Len())
	}
	if !b.Push(4) {
		t.Fatal("Push after Stop must ask for a drainer")
	}
}

// TestBoxConcurrentExactlyOnce pushes from many goroutines while drainers
// come and go, and checks every item is drained exactly once, in per-producer
// order, with never two drainers at once.
func TestBoxConcurrentExactlyOnce(t *testing.T) {
	const producers, each = 8, 5000
	type item struct{ p, n int }
	var (
		b       Box[item]
		wg      sync.WaitGroup
		mu      sync.Mutex
		next    [producers]int
		active  int
		drained int
	)
	drain := func() {
		defer wg.Done()
		mu.Lock()
		active++
		if active > 1 {
			t.Error("two drainers at once")
		}
		mu.Unlock()
		for {
			v, ok := b.Next()
			if !ok {
				break
			}
			mu.Lock()
			if v.n != next[v.p] {
				t.Errorf("producer %d: got %d, want %d", v.p, v.n, next[v.p])
			}
			next[v.p]++
			drained++
			mu.Unlock()
		}
		mu.Lock()
		active--
		mu.Unlock()
	}
	var pw sync.WaitGroup
	for p := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for n := range each {
				if b.Push(item{p, n}) {
					wg.Add(1)
					go drain()
				}
			}
		}()
	}
	pw.Wait()
	wg.Wait()
	if drained != producers*each {
		t.Fatalf("drained %d, want %d", drained, producers*each)
	}
}

func TestBoxNextStopsTheDrainer(t *testing.T) {
	var b Box[int]
	if !b.Push(1) {
		t.Fatal("the first Push must ask for a drainer")
	}
	if b.Push(2) {
		t.Fatal("a Push while a drainer runs must not ask for another")
	}
	for want := 1; want <= 2; want++ {
		if v, ok := b.Next(); !ok || v != want {
			t.Fatalf("Next = %d, %v; want %d, true", v, ok, want)
		}
	}
	if _, ok := b.Next(); ok {
		t.Fatal("Next on an empty box returned ok")
	}
	if !b.Push(3) {
		t.Fatal("after Next found nothing, Push must ask for a drainer")
	}
}

// TestBoxBusyDrainerDoesNotGrow: a queue that never empties must not leave
// its buffer growing with every item it ever held.
func TestBoxBusyDrainerDoesNotGrow(t *testing.T) {
	var b Box[int]
	b.Push(0)
	for i := 1; i < 10_000; i++ {
		b.Push(i)
		if v, ok := b.Next(); !ok || v != i-1 {
			t.Fatalf("Next = %d, %v; want %d, true", v, ok, i-1)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(b.items) > 4*shrinkAbove {
		t.Fatalf("the buffer grew to %d for a queue that never held more than two items", cap(b.items))
	}
}

func TestBoxItemsCopiesTheQueue(t *testing.T) {
	var b Box[int]
	for i := range 3 {
		b.Push(i)
	}
	if v, ok := b.Next(); !ok || v != 0 {
		t.Fatalf("Next = %d, %v; want 0, true", v, ok)
	}
	items := b.Items()
	if len(items) != 2 || items[0] != 1 || items[1] != 2 {
		t.Fatalf("Items = %v, want [1 2]", items)
	}
	items[0] = 99
	if v, _ := b.Next(); v != 1 {
		t.Fatalf("changing what Items returned changed the queue: Next = %d, want 1", v)
	}
}

func TestBoxBusyWhileAnItemIsQueuedOrHandled(t *testing.T) {
	var b Box[int]
	if b.Busy() {
		t.Fatal("a new Box is busy")
	}
	b.Push(1)
	if !b.Busy() {
		t.Fatal("a Box with an item queued is not busy")
	}
	b.Next()
	if !b.Busy() {
		t.Fatal("a Box whose last item is being handled is not busy")
	}
	b.Next()
	if b.Busy() {
		t.Fatal("a Box whose drainer found it empty is busy")
	}
}

// TestBoxHeld: the item the drainer took last is held while it handles
// it, until it asks for the next one or stops.
func TestBoxHeld(t *testing.T) {
	var b Box[*int]
	one, two := new(int), new(int)
	held := func(want *int) {
		t.Helper()
		if got, ok := b.Held(); got != want || ok != (want != nil) {
			t.Fatalf("Held = %v, %v; want %v", got, ok, want)
		}
	}
	held(nil)
	b.Push(one)
	b.Push(two)
	held(nil) // queued, not taken
	b.Next()
	held(one)
	b.Next()
	held(two)
	b.Next() // empty: the drainer stops
	held(nil)
	b.Push(one)
	b.Next()
	held(one)
	b.Stop()
	held(nil)
}
