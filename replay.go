package agentsociety

import "iter"

// ModelCallsUpTo counts, for each agent, the model calls it had started by
// event seq (that event included): the EventModelCallStarted events, one
// for each attempt. An agent calls the model one call at a time, so its
// n-th such event is its n-th call to Config.Model; the counts are
// therefore what llm.Fork takes to replay a recorded run (an llm.Recorder's
// recording) up to that event and go live after it. Pass the events of the
// recorded run, from the first (Society.Events(ctx, 1)); an error reading
// them, such as a MissedEventsError for events no longer kept, is returned,
// since a count that misses calls would fork at the wrong place.
func ModelCallsUpTo(events iter.Seq2[Event, error], seq uint64) (map[string]int, error) {
	calls := map[string]int{}
	for e, err := range events {
		if err != nil {
			return nil, err
		}
		if e.Seq > seq {
			break
		}
		if e.Kind == EventModelCallStarted {
			calls[e.Agent]++
		}
	}
	return calls, nil
}
