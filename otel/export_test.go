package otel

import (
	"iter"

	as "agentsociety"
)

// EndedTasksKept is endedTasksKept, for tests.
const EndedTasksKept = endedTasksKept

// TraceKept traces events as Trace does and returns how many entries each
// of the tracer's maps holds after the last event, before the spans still
// open are ended: what a tracer that follows a society keeps.
func TraceKept(events iter.Seq2[as.Event, error], opts Options) map[string]int {
	t := newTracer(opts)
	next := max(opts.From, 1)
	t.consume(events, &next)
	kept := map[string]int{
		"tasks":    len(t.tasks),
		"ended":    len(t.ended.byID),
		"turns":    len(t.turns),
		"sent":     len(t.sent),
		"queued":   len(t.queued),
		"chats":    len(t.chats),
		"roles":    len(t.roles),
		"children": len(t.children),
		"active":   len(t.active),
	}
	t.finish()
	return kept
}
