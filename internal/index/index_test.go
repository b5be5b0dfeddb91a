package index

import (
	"strconv"
	"testing"
)

// TestIndexFindsEveryKey adds keys one by one, through several growths of
// the table, and checks after each that every key added is found at its
// position and that keys not added are not.
func TestIndexFindsEveryKey(t *testing.T) {
	var keys []string
	keyAt := func(i int) string { return keys[i] }
	var x Index
	if got := x.Find("a", keyAt); got != -1 {
		t.Fatalf("empty index finds %d", got)
	}
	for n := range 300 {
		keys = append(keys, "agent-"+strconv.Itoa(n))
		x.Add(keys[n], n, keyAt)
		if x.Len() != n+1 {
			t.Fatalf("Len = %d after %d adds", x.Len(), n+1)
		}
		for i, k := range keys {
			if got := x.Find(k, keyAt); got != i {
				t.Fatalf("after %d adds, Find(%q) = %d, want %d", n+1, k, got, i)
			}
		}
		for _, k := range []string{"", "agent-", "agent-" + strconv.Itoa(n+1), "other"} {
			if got := x.Find(k, keyAt); got != -1 {
				t.Fatalf("after %d adds, Find(%q) = %d, want -1", n+1, k, got)
			}
		}
	}
}

type entry struct{ key, value string }

func (e entry) Key() string { return e.key }

// TestListFindsEveryKey checks a List below and past ScanUpTo, and past
// ChunkSize into several chunks: every entry is found at its place, in the
// order added, and a key not added is not.
func TestListFindsEveryKey(t *testing.T) {
	var l List[entry]
	key := func(i int) string { return "c" + strconv.Itoa(i) }
	check := func(n int) {
		t.Helper()
		if l.Len() != n {
			t.Fatalf("Len = %d after %d appends", l.Len(), n)
		}
		for i := range n {
			if got := l.Find(key(i)); got != i || l.At(i).value != strconv.Itoa(i) {
				t.Fatalf("after %d appends, Find(%q) = %d, want %d", n, key(i), got, i)
			}
		}
		if got := l.Find(key(n)); got != -1 {
			t.Fatalf("after %d appends, a missing key is at %d", n, got)
		}
		i := 0
		for e := range l.All {
			if e.key != key(i) {
				t.Fatalf("after %d appends, All yields %q at %d", n, e.key, i)
			}
			i++
		}
		if i != n {
			t.Fatalf("after %d appends, All yields %d entries", n, i)
		}
	}
	for n := range 3*ChunkSize + 10 {
		l.Append(entry{key(n), strconv.Itoa(n)})
		if n < 3*ScanUpTo || n%97 == 0 || n%ChunkSize < 2 {
			check(n + 1)
		}
		if (l.long != nil) != (n+1 > ScanUpTo) {
			t.Fatalf("after %d appends, indexed = %v", n+1, l.long != nil)
		}
	}
	check(l.Len())
	if cap(l.head) != ChunkSize {
		t.Fatalf("the first chunk has room for %d entries, want %d", cap(l.head), ChunkSize)
	}
	// An entry replaced in place is found with its new value.
	*l.At(ChunkSize + 5) = entry{key(ChunkSize + 5), "new"}
	if i := l.Find(key(ChunkSize + 5)); l.At(i).value != "new" {
		t.Fatalf("replaced entry reads %q", l.At(i).value)
	}
}
