package cluster

// Rank is rank, for the placement test.
var Rank = rank

// SetCallHook makes the leader run f as it receives each user call,
// before it takes the call up; nil removes it.
func SetCallHook(f func()) {
	if f == nil {
		testHookCall.Store(nil)
		return
	}
	testHookCall.Store(&f)
}
