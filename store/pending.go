package store

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
)

// pendingShards is the number of locks pending messages are spread over.
// Every message is accepted and finished through the store, from every core
// at once, so one lock would make the store the society's bottleneck.
const pendingShards = 16

// pendingSet keeps the messages accepted and not finished, sharded by id.
// Callers lock the shards a change touches with lock and unlock, always in
// ascending order, so that changes touching several shards cannot deadlock.
type pendingSet struct {
	seed   maphash.Seed
	shards [pendingShards]pendingShard
}

type pendingShard struct {
	mu sync.Mutex
	// A map[string]Message would box each value (a Message is over the 128
	// bytes Go maps keep inline) and so allocate on every accept; instead
	// messages sit in reusable slots found by id.
	byID  map[string]int
	slots []Message
	free  []int
	_     [64]byte // keeps neighbouring shards' locks off one cache line
}

func newPendingSet() *pendingSet {
	p := &pendingSet{seed: maphash.MakeSeed()}
	for i := range p.shards {
		p.shards[i].byID = make(map[string]int)
	}
	return p
}

func (p *pendingSet) shard(id string) *pendingShard {
	return &p.shards[p.index(id)]
}

func (p *pendingSet) index(id string) uint64 {
	return maphash.String(p.seed, id) % pendingShards
}

// mask returns the set of shards that c's messages touch.
func (p *pendingSet) mask(c *Change) uint32 {
	var m uint32
	for _, msg := range c.Accepted {
		m |= 1 << p.index(msg.ID)
	}
	for _, id := range c.Finished {
		m |= 1 << p.index(id)
	}
	return m
}

const allShards = 1<<pendingShards - 1

func (p *pendingSet) lock(mask uint32) {
	for m := mask; m != 0; m &= m - 1 {
		p.shards[bits.TrailingZeros32(m)].mu.Lock()
	}
}

func (p *pendingSet) unlock(mask uint32) {
	for m := mask; m != 0; m &= m - 1 {
		p.shards[bits.TrailingZeros32(m)].mu.Unlock()
	}
}

// check reports an error wrapping ErrExists if a message id in msgs is
// already pending or appears twice in msgs. The shards of msgs are locked.
func (p *pendingSet) check(msgs []Message) error {
	// Changes mostly carry a message or two, for which a scan beats
	// allocating a set; a society closing on a volatile store records its
	// whole queue in one change, for which a scan would be quadratic.
	var seen map[string]bool
	if len(msgs) > scanAtMost {
		seen = make(map[string]bool, len(msgs))
	}
	for i, msg := range msgs {
		if _, ok := p.shard(msg.ID).byID[msg.ID]; ok {
			return fmt.Errorf("%w: message %q is pending", ErrExists, msg.ID)
		}
		twice := seen[msg.ID]
		if seen != nil {
			seen[msg.ID] = true
		} else {
			twice = slices.ContainsFunc(msgs[:i], func(prev Message) bool { return prev.ID == msg.ID })
		}
		if twice {
			return fmt.Errorf("%w: message %q accepted twice in one change", ErrExists, msg.ID)
		}
	}
	return nil
}

// scanAtMost is the number of messages in a change up to which check finds
// duplicates by scanning.
const scanAtMost = 16

// add makes msg pending. Its shard is locked.
func (p *pendingSet) add(msg Message) {
	s := p.shard(msg.ID)
	var i int
	if n := len(s.free); n > 0 {
		i = s.free[n-1]
		s.free = s.free[:n-1]
		s.slots[i] = msg
	} else {
		i = len(s.slots)
		s.slots = append(s.slots, msg)
	}
	s.byID[msg.ID] = i
}

// finish forgets message id, if it is pending. Its shard is locked.
func (p *pendingSet) finish(id string) {
	s := p.shard(id)
	i, ok := s.byID[id]
	if !ok {
		return
	}
	delete(s.byID, id)
	// Clear the slot so that its payload and strings can be collected.
	s.slots[i] = Message{}
	s.free = append(s.free, i)
}

// all returns copies of every pending message, unordered. Every shard is
// locked.
func (p *pendingSet) all() []Message {
	var out []Message
	for i := range p.shards {
		s := &p.shards[i]
		for _, j := range s.byID {
			out = append(out, cloneMessage(s.slots[j]))
		}
	}
	return out
}
