package cluster

import "context"

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

// SetServeHook makes the leader run f, with its leading context, as it
// starts making each user call it took up; nil removes it.
func SetServeHook(f func(context.Context)) {
	if f == nil {
		testHookServe.Store(nil)
		return
	}
	testHookServe.Store(&f)
}
