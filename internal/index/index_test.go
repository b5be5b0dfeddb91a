package index

import (
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"
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

// TestListDelete checks a List against a slice through random appends,
// deletions (of present and absent keys), replacements and re-appends of
// deleted keys, short and long, across compactions: it always holds the
// entries the slice holds, in the same order, each found by its key.
func TestListDelete(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l List[entry]
		var want []entry
		next := 0
		keys := rapid.IntRange(0, 3*ScanUpTo)
		find := func(k string) int {
			return slices.IndexFunc(want, func(e entry) bool { return e.key == k })
		}
		for range rapid.IntRange(1, 400).Draw(t, "ops") {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5: // append: mostly a new key, sometimes one deleted before
				k := "k" + strconv.Itoa(next)
				if op == 0 {
					k = "k" + strconv.Itoa(keys.Draw(t, "old key"))
				}
				if find(k) >= 0 {
					continue
				}
				next++
				l.Append(entry{k, strconv.Itoa(next)})
				want = append(want, entry{k, strconv.Itoa(next)})
			case op < 9: // delete, mostly one that is there
				k := "k" + strconv.Itoa(keys.Draw(t, "key"))
				if len(want) > 0 && op < 8 {
					k = want[rapid.IntRange(0, len(want)-1).Draw(t, "at")].key
				}
				i := find(k)
				if got := l.Delete(k); got != (i >= 0) {
					t.Fatalf("Delete(%q) = %v, want %v", k, got, i >= 0)
				}
				if i >= 0 {
					want = slices.Delete(want, i, i+1)
				}
			default: // replace in place
				if len(want) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(want)-1).Draw(t, "replace")
				want[i].value += "'"
				*l.At(l.Find(want[i].key)) = want[i]
			}
			if l.Len() != len(want) {
				t.Fatalf("Len = %d, want %d", l.Len(), len(want))
			}
			var got []entry
			for e := range l.All {
				got = append(got, *e)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("All = %v, want %v", got, want)
			}
			for _, e := range want {
				if i := l.Find(e.key); i < 0 || *l.At(i) != e {
					t.Fatalf("Find(%q) = %d", e.key, i)
				}
			}
			if l.Find("") != -1 || l.Find("k-absent") != -1 {
				t.Fatal("an absent key is found")
			}
			if l.long != nil && l.long.dead > l.Len() {
				t.Fatalf("%d deleted entries kept beside %d", l.long.dead, l.Len())
			}
		}
	})
}
