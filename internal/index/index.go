// Package index finds the entries of a list by their string keys in a few
// bytes per entry: a society indexes the contacts of a parent of many
// children, and a store its records, a million at a time, where a
// map[string]int would cost forty bytes or more for each.
package index

import (
	"hash/maphash"
	"slices"
)

// Index maps keys to the positions 0, 1, 2, ... of a list the caller keeps,
// which is consulted through a keyAt function returning the key at a
// position. Entries are added at the end of the list; a [List] deletes one
// by emptying its key where it is, so that no key finds it.
//
// An Index is a hash table of positions with open addressing: it holds no
// keys of its own, only a byte of each key's hash beside its position (5
// bytes a slot), so that a lookup compares with the list's keys only where
// that byte matches. The zero value is an empty index. An Index is not safe
// for concurrent use.
type Index struct {
	tags  []uint8 // 0 for a free slot, else tagBit | 7 bits of the key's hash
	slots []int32 // the position at each slot whose tag is set
	n     int     // positions held
}

const tagBit = 0x80

var seed = maphash.MakeSeed()

// hash returns where key's probe starts and its tag.
func hash(key string) (uint64, uint8) {
	h := maphash.String(seed, key)
	return h, uint8(h>>57) | tagBit
}

// Find returns the position of key, or -1 if it has none.
func (x *Index) Find(key string, keyAt func(int) string) int {
	if x.n == 0 {
		return -1
	}
	h, tag := hash(key)
	mask := len(x.tags) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch x.tags[i] {
		case 0:
			return -1
		case tag:
			if p := int(x.slots[i]); keyAt(p) == key {
				return p
			}
		}
	}
}

// Add records that key is at pos, which the caller has just appended to
// its list. Every earlier position must have been added before, and key
// must not be in the index already.
func (x *Index) Add(key string, pos int, keyAt func(int) string) {
	if 4*(x.n+1) > 3*len(x.tags) { // at most three quarters full
		x.grow(keyAt)
	}
	x.put(key, pos)
	x.n++
}

// Len returns the number of positions held.
func (x *Index) Len() int { return x.n }

func (x *Index) put(key string, pos int) {
	h, tag := hash(key)
	mask := len(x.tags) - 1
	i := int(h) & mask
	for x.tags[i] != 0 {
		i = (i + 1) & mask
	}
	x.tags[i], x.slots[i] = tag, int32(pos)
}

// grow doubles the table and adds every position again.
func (x *Index) grow(keyAt func(int) string) {
	size := max(16, 2*len(x.tags))
	x.tags, x.slots = make([]uint8, size), make([]int32, size)
	for pos := range x.n {
		x.put(keyAt(pos), pos)
	}
}

// Keyed is an entry of a [List]: Key returns the key it is found by.
type Keyed interface{ Key() string }

// List is a list of entries in the order added that finds an entry by its
// key: by a scan while the list is short, which costs nothing to keep, and
// through an [Index] once it holds more than ScanUpTo entries. Most lists
// of a society (an idle agent's few contacts) stay short; a parent's list
// of its children, or a store's list of agents, may hold a million.
//
// The first ChunkSize entries are a slice that grows as slices do; the
// entries after them live in chunks of ChunkSize, so that appending to a
// long list never copies more than one chunk.
//
// An entry's key is never empty: a deleted entry of a long list stays in
// its place as the zero T, whose key is empty, until the deleted are more
// than those left, when the list is built again without them.
//
// The zero value is an empty list. A List is not safe for concurrent use.
type List[T Keyed] struct {
	head []T          // the first entries, up to ChunkSize
	long *longList[T] // nil while the list holds ScanUpTo entries or fewer
}

type longList[T Keyed] struct {
	index  Index
	chunks [][]T // the entries after head, each chunk full but the last
	dead   int   // deleted entries, zero Ts, in head and chunks
}

// ScanUpTo is the length up to which a List finds entries by a scan.
const ScanUpTo = 16

// ChunkSize is the number of entries in a chunk of a long List.
const ChunkSize = 1024

// Len returns the number of entries.
func (l *List[T]) Len() int {
	if l.long != nil {
		return l.slots() - l.long.dead
	}
	return len(l.head)
}

// slots returns the number of places, deleted entries included.
func (l *List[T]) slots() int {
	n := len(l.head)
	if l.long != nil && len(l.long.chunks) > 0 {
		c := l.long.chunks
		n += (len(c)-1)*ChunkSize + len(c[len(c)-1])
	}
	return n
}

// At returns the entry at position i, which the caller may replace with
// one of the same key. It is valid until the next Append or Delete.
func (l *List[T]) At(i int) *T {
	if i < len(l.head) {
		return &l.head[i]
	}
	i -= ChunkSize
	return &l.long.chunks[i/ChunkSize][i%ChunkSize]
}

// Find returns the position of the entry with key, or -1.
func (l *List[T]) Find(key string) int {
	if key == "" {
		return -1 // no entry's key is empty; a deleted one's is
	}
	if l.long != nil {
		return l.long.index.Find(key, l.keyAt)
	}
	for i := range l.head {
		if l.head[i].Key() == key {
			return i
		}
	}
	return -1
}

// Append adds v, whose key l must not hold yet and is not empty, at the
// end.
func (l *List[T]) Append(v T) {
	n := l.slots()
	if n < ChunkSize {
		if len(l.head) == cap(l.head) && n >= 8 {
			// Grow to exactly twice, not to what append would round up
			// to, so that head ends at ChunkSize.
			l.head = append(make([]T, 0, min(2*n, ChunkSize)), l.head...)
		}
		l.head = append(l.head, v)
	} else {
		c := &l.long.chunks
		if (n-ChunkSize)%ChunkSize == 0 {
			*c = append(*c, make([]T, 0, ChunkSize))
		}
		last := &(*c)[len(*c)-1]
		*last = append(*last, v)
	}
	switch {
	case l.long != nil:
		l.long.index.Add(v.Key(), n, l.keyAt)
	case n+1 > ScanUpTo:
		l.long = new(longList[T])
		for i := range n + 1 {
			l.long.index.Add(l.keyAt(i), i, l.keyAt)
		}
	}
}

// Delete removes the entry with key, and reports whether there was one.
// The positions of the other entries may change.
func (l *List[T]) Delete(key string) bool {
	i := l.Find(key)
	if i < 0 {
		return false
	}
	if l.long == nil {
		l.head = slices.Delete(l.head, i, i+1)
		return true
	}
	var zero T
	*l.At(i) = zero
	l.long.dead++
	if l.long.dead > l.Len() {
		// Built again without the deleted: a cost of the list's length
		// once at most every length/2 deletions.
		var live List[T]
		for e := range l.All {
			live.Append(*e)
		}
		*l = live
	}
	return true
}

// All calls yield with each entry in order, until it returns false.
func (l *List[T]) All(yield func(*T) bool) {
	dead := l.long != nil && l.long.dead > 0
	for i := range l.head {
		if dead && l.head[i].Key() == "" {
			continue
		}
		if !yield(&l.head[i]) {
			return
		}
	}
	if l.long == nil {
		return
	}
	for _, c := range l.long.chunks {
		for i := range c {
			if dead && c[i].Key() == "" {
				continue
			}
			if !yield(&c[i]) {
				return
			}
		}
	}
}

func (l *List[T]) keyAt(i int) string { return (*l.At(i)).Key() }
