package agentsociety

// A drainer is a goroutine that handles one agent's messages until its queue
// is empty, then exits, so an idle agent holds no goroutine. (Parking
// drainers for reuse was measured and bought nothing: a handoff to a parked
// goroutine costs what starting one does.)

// start gets a's queue drained by a new drainer. Called with s.mu held and
// s.closed false, so the drainer is counted before Close can wait.
func (s *Society) start(a *agent) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		growStack()
		s.drain(a)
	}()
}

// stackReserve is more than a message's path needs (handler, send, payload
// check, store), measured with the routing benchmark's profile.
const stackReserve = 6 << 10

// growStack makes a new goroutine's stack big enough for a message's path at
// once. A goroutine starts with a small stack that the runtime doubles when
// a call needs more, copying it and adjusting every frame on it; grown deep
// in that path, the copies took nearly half the CPU of routing a message.
// Grown here, with one frame on the stack, the copy is nearly free.
//
//go:noinline
func growStack() {
	var reserve [stackReserve]byte
	touch(reserve[:])
}

// touch reads b, so that the compiler keeps growStack's frame.
//
//go:noinline
func touch(b []byte) byte { return b[len(b)-1] }
