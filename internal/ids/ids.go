// Package ids makes the identifiers of a society: short sequential ones for
// what a model reads and writes often (agents, roles), and random ones for
// what must not collide across runs of the same store (messages, tasks,
// artifacts, requests).
package ids

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync/atomic"
)

// Sequence makes ids prefix-1, prefix-2, ... It is safe for concurrent use.
type Sequence struct {
	prefix string
	n      atomic.Uint64
}

// NewSequence returns a Sequence whose first id is prefix-1.
func NewSequence(prefix string) *Sequence { return &Sequence{prefix: prefix + "-"} }

// Next returns the next id.
func (s *Sequence) Next() string { return numbered(s.prefix, s.n.Add(1)) }

// Last returns the last id Next returned or Observe saw, or "" if none.
func (s *Sequence) Last() string {
	if n := s.n.Load(); n > 0 {
		return numbered(s.prefix, n)
	}
	return ""
}

// Observe makes sure later ids come after id, if id is one of this
// sequence's; it lets a society reopened on a store go on where it stopped.
func (s *Sequence) Observe(id string) {
	rest, ok := strings.CutPrefix(id, s.prefix)
	if !ok {
		return
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return
	}
	for {
		cur := s.n.Load()
		if cur >= n || s.n.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Random returns prefix-<16 hex digits>.
func Random(prefix string) string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read documents it)
	return prefix + "-" + hex.EncodeToString(b[:])
}

// Epoch names things by a number the caller keeps, after a random prefix
// chosen once: as unique across runs as Random, and as cheap as formatting
// the number, which matters on a hot path.
type Epoch struct{ prefix string }

// NewEpoch returns an Epoch whose ids are prefix-<random>-<n>.
func NewEpoch(prefix string) Epoch {
	var b [4]byte
	rand.Read(b[:])
	return Epoch{prefix: prefix + "-" + hex.EncodeToString(b[:]) + "-"}
}

// ID returns the id of number n. It allocates once.
func (e Epoch) ID(n uint64) string { return numbered(e.prefix, n) }

// numbered returns prefix followed by n, allocating once.
func numbered(prefix string, n uint64) string {
	var buf [48]byte
	return string(strconv.AppendUint(append(buf[:0], prefix...), n, 10))
}
