package agentsociety

import (
	"fmt"
	"iter"
)

// ModelCallsUpTo counts, for each agent, the model calls it had started by
// event seq (that event included): the EventModelCallStarted events, one
// for each attempt. An agent calls the model one call at a time, so its
// n-th such event is its n-th call to Config.Model; the counts are
// therefore what llm.Fork takes to replay a recorded run (an llm.Recorder's
// recording) up to that event and go live after it. Pass the events of the
// recorded run, from the first (Society.Events(ctx, 1)); an error reading
// them, such as a MissedEventsError for events no longer kept, is returned,
// since a count that misses calls would fork at the wrong place. An event
// seq past the run's last is refused with ErrInvalidArgument: the run never
// reached it.
func ModelCallsUpTo(events iter.Seq2[Event, error], seq uint64) (map[string]int, error) {
	calls := map[string]int{}
	var last uint64
	for e, err := range events {
		if err != nil {
			return nil, err
		}
		if e.Seq > seq {
			return calls, nil
		}
		last = e.Seq
		if e.Kind == EventModelCallStarted {
			calls[e.Agent]++
		}
	}
	if last < seq {
		return nil, &Error{Code: ErrInvalidArgument, Message: fmt.Sprintf("event %d is past the last event of the run, %d", seq, last)}
	}
	return calls, nil
}
