package agentsociety_test

import (
	"fmt"
	"slices"
	"testing"

	as "agentsociety"
	"agentsociety/llm/llmtest"
)

// The 50-subtask benchmark (issue 11 §2): 50 documents of 1-3 KB are each
// translated into 1-2 KB and assembled into a report for user, by a lead
// that splits them among 5, 10 or 25 translators or gives each document its
// own, and, as the baseline, by the lead alone. Each sub-benchmark reports
// the largest prompt any agent sent, as sent on the wire, in o200k tokens
// (max-prompt-tokens), the largest prompt of the lead doing the whole job
// alone, with a history that holds it all, in the same run
// (alone-prompt-tokens), and their ratio, which seed
// 002 §2.4 wants at most 1/5; and the model calls of the job (model-calls)
// beside those of the same job run, in the same benchmark, by a script that
// never sets end_turn (calls-without-end_turn).

// largestPrompt is the largest prompt of a run, in o200k tokens, and whose
// it was.
type largestPrompt struct {
	tokens        int
	agent, role   string
	system, tools int // tokens of the system prompt and the tool schemas alone
	messages      int // number of messages
}

// findLargestPrompt tokenises the largest requests the model received (the
// largest few by wire bytes, of which the largest in tokens is the
// largest) and returns the largest.
func findLargestPrompt(b *testing.B, m *llmtest.Model) largestPrompt {
	reqs := m.Requests()
	wire := make([]string, len(reqs))
	order := make([]int, len(reqs))
	for i := range reqs {
		wire[i], order[i] = wireRequest(&reqs[i]), i
	}
	slices.SortFunc(order, func(x, y int) int { return len(wire[y]) - len(wire[x]) })
	var best largestPrompt
	for _, i := range order[:min(len(order), 5)] {
		if n := o200k(b, wire[i]); n > best.tokens {
			r := &reqs[i]
			best = largestPrompt{tokens: n, agent: r.Agent, role: firstMatch(jobRoleRe, r.System), messages: len(r.Messages)}
			best.system, best.tools = overhead(b, r)
		}
	}
	if best.agent == as.RootID {
		best.role = as.RootID
	}
	return best
}

// runDocsJob runs the translation job split among workers translators (0:
// the lead alone) on a fresh competent model that writes its calls as
// script says, checks that it completed, and returns the model. The lead
// alone is given the history it needs to hold the whole job (no trimming):
// the baseline is what one agent must read to do the job by itself.
func runDocsJob(b *testing.B, workers int, script jobScript) *llmtest.Model {
	model := script.model()
	var budget []int
	if workers == 0 {
		budget = []int{1 << 30}
	}
	if got, _, msgs := runJob(b, docsJob(workers), model, budget...); got != completed {
		b.Fatalf("the job split among %d: %s; user received %q", workers, got, msgs)
	}
	return model
}

func BenchmarkFiftySubtasks(b *testing.B) {
	for _, workers := range []int{0, 5, 10, 25, 50} {
		name := fmt.Sprintf("workers=%d", workers)
		if workers == 0 {
			name = "alone"
		}
		b.Run(name, func(b *testing.B) {
			alone := findLargestPrompt(b, runDocsJob(b, 0, jobScript{endTurn: true}))
			without := runDocsJob(b, workers, jobScript{}).Calls()
			b.ResetTimer()
			cpu := startCPU(b)
			var model *llmtest.Model
			for range b.N {
				model = runDocsJob(b, workers, jobScript{endTurn: true})
			}
			cpu.report()
			b.StopTimer()
			got := findLargestPrompt(b, model)
			b.ReportMetric(float64(got.tokens), "max-prompt-tokens")
			b.ReportMetric(float64(alone.tokens), "alone-prompt-tokens")
			b.ReportMetric(float64(got.tokens)/float64(alone.tokens), "ratio")
			b.ReportMetric(float64(model.Calls()), "model-calls")
			b.ReportMetric(float64(without), "calls-without-end_turn")
			b.Logf("largest prompt: %d tokens, %s (%s): system %d, tools %d, %d messages; alone: %d tokens (system %d, tools %d, %d messages); ratio %.3f (target ≤ 0.200); model calls %d with end_turn, %d without (%.0f%% saved)",
				got.tokens, got.agent, got.role, got.system, got.tools, got.messages, alone.tokens, alone.system, alone.tools, alone.messages, float64(got.tokens)/float64(alone.tokens),
				model.Calls(), without, 100*float64(without-model.Calls())/float64(without))
		})
	}
}
