package agentsociety_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	as "agentsociety"
	"agentsociety/llm"
	"agentsociety/llm/llmtest"
)

// The misbehaviour suite (issue 11 §4): each job, run by a competent
// scripted society (jobModel) into which one of llmtest's personalities is
// mixed, must end in one of two ways: the job completes, or user is told,
// in a message naming the agent, what went wrong: by an agent, or by the
// society's report of a task gone quiet (status quiet), which names the
// agents whose last words reached nobody. A silent stall, where the society
// goes quiet and user has neither, fails the test, and so does a quiet
// report that names no agent.

// outcome is how a job ended.
type outcome string

const (
	completed outcome = "completes"
	reported  outcome = "reported to user"
	// quietUnnamed is a task gone quiet that the society reported to user
	// without naming an agent: user knows it stopped, not who stopped it.
	quietUnnamed outcome = "QUIET, NOBODY NAMED"
	stalled      outcome = "SILENT STALL"
)

// suiteJob is a job of the suite.
type suiteJob struct {
	name string
	// submit starts the job on s and returns what user must receive for it
	// to count as completed.
	submit func(t testing.TB, s *as.Society) (done func(m as.Message) bool)
	// worker picks the workers a personality is mixed into.
	worker func(req *llm.Request) bool
}

// docsJob is the translation job split among workers translators (0: the
// lead alone).
func docsJob(workers int) suiteJob {
	return suiteJob{fmt.Sprintf("50 documents/%d", workers), func(t testing.TB, s *as.Society) func(as.Message) bool { return submitDocs(t, s, workers) }, func(req *llm.Request) bool {
		// One translator in five: batches 1, 6, 11, ...
		b := jobBatchRe.FindStringSubmatch(readJobTurn(req, jobScript{}).brief)
		return firstMatch(jobRoleRe, req.System) == "translator" && b != nil && (atoi(b[1])-1)%5 == 0
	}}
}

var suiteJobs = []suiteJob{
	{"calculator", submitCalc, func(req *llm.Request) bool {
		role := firstMatch(jobRoleRe, req.System)
		return role == "developer" || role == "tester"
	}},
	docsJob(10),
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

func isLead(req *llm.Request) bool { return firstMatch(jobRoleRe, req.System) == "lead" }

// submitCalc submits seed 001's requirement; user must receive the page.
func submitCalc(t testing.TB, s *as.Society) func(as.Message) bool {
	if _, err := s.SubmitRequirement(context.Background(), calcRequirement); err != nil {
		t.Fatal(err)
	}
	return func(m as.Message) bool {
		data, ok := referenced(s, m)
		return ok && string(data) == calcPage
	}
}

// referenced returns the content of the first artifact m refers to.
func referenced(s *as.Society, m as.Message) ([]byte, bool) {
	ref := jobRefRe.FindString(m.Text())
	if ref == "" {
		return nil, false
	}
	_, data, err := s.GetArtifact(context.Background(), ref)
	return data, err == nil
}

// submitDocs stores 50 documents and submits the translation job, split in
// the given number of batches (0: the lead works alone); user must receive
// a report listing a translation of every document.
func submitDocs(t testing.TB, s *as.Society, workers int) func(as.Message) bool {
	root, err := s.Actor(as.RootID)
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for i := range 50 {
		a, err := root.PutArtifact(context.Background(), as.ArtifactSpec{Name: fmt.Sprintf("doc-%02d.txt", i+1), MediaType: "text/plain", Data: []byte(jobDoc(i))})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, a.Ref())
	}
	if _, err := s.SubmitRequirement(context.Background(), docsRequirement(refs, workers)); err != nil {
		t.Fatal(err)
	}
	return func(m as.Message) bool {
		report, ok := referenced(s, m)
		if !ok {
			return false
		}
		for i, in := range refs {
			line := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\. %s → (artifact:\S+)：`, i+1, regexp.QuoteMeta(in))).FindStringSubmatch(string(report))
			if line == nil {
				return false
			}
			_, out, err := s.GetArtifact(context.Background(), line[1])
			if err != nil || string(out) != jobTranslate(jobDoc(i)) {
				return false
			}
		}
		return true
	}
}

// problemWords are what a message that reports a problem says.
var problemWords = regexp.MustCompile(`失败|问题|无法|error|fail|cut off|截断`)

// runJob runs job on model until the society goes quiet and says how it
// ended, which agents the report to user named when it was reported, and
// the texts of the messages user received.
func runJob(t testing.TB, job suiteJob, model llm.Model, historyBudget ...int) (got outcome, named, texts []string) {
	cfg := as.Config{Model: model, Logger: quiet}
	if len(historyBudget) > 0 {
		cfg.HistoryBudget = historyBudget[0]
	}
	s, closeSociety := openSociety(t, cfg)
	defer closeSociety()
	var inbox syncSlice[as.Message]
	s.OnUserMessage(inbox.add)
	done := job.submit(t, s)
	// A task that goes quiet with user unanswered is reported to user, by
	// a report that may still be on its way when the society is otherwise
	// quiet: wait for user to have been told something too. Only a society
	// that stalls in silence makes the wait reach hangGuard.
	if !poll(func() bool { return s.Quiet() && len(inbox.all()) > 0 }) {
		waitQuiet(t, s)
	}
	msgs := inbox.all()
	for _, m := range msgs {
		texts = append(texts, m.Text())
	}
	if slices.ContainsFunc(msgs, func(m as.Message) bool { return !isQuietReport(m) && done(m) }) {
		return completed, nil, texts
	}
	got = stalled
	for _, m := range msgs {
		switch names := namedIn(m); {
		case len(names) > 0:
			return reported, names, texts
		case isQuietReport(m):
			got = quietUnnamed
		}
	}
	return got, nil, texts
}

// namedIn returns the agents a message to user names as the ones where
// something went wrong: those a quiet report lists, or those an agent's
// report of a problem mentions.
func namedIn(m as.Message) []string {
	var names []string
	switch {
	case isQuietReport(m):
		for _, n := range quietNamed.FindAllStringSubmatch(m.Text(), -1) {
			names = append(names, n[1])
		}
	case problemWords.MatchString(m.Text()):
		names = slices.Compact(slices.Sorted(slices.Values(agentID.FindAllString(m.Text(), -1))))
	}
	return names
}

// isQuietReport reports whether m is the society's report of a task gone
// quiet without an answer.
func isQuietReport(m as.Message) bool {
	var p as.StatusReportPayload
	return m.From == as.RootID && m.Type == as.StatusReport && m.Decode(&p) == nil && p.Status == as.StatusQuiet
}

var (
	// quietNamed finds the agents a quiet report lists, with their roles.
	quietNamed = regexp.MustCompile(`(?m)^- (agent-\d+（[^）]+）)`)
	agentID    = regexp.MustCompile(`agent-\d+`)
)

// TestCompetentJobsComplete checks the script the suite and the benchmark
// rely on: with no personality mixed in, each job completes, whether the
// script ends its turns with end_turn or without.
func TestCompetentJobsComplete(t *testing.T) {
	for _, job := range append(suiteJobs, docsJob(0), docsJob(50)) {
		for _, script := range []jobScript{{endTurn: true}, {}} {
			t.Run(fmt.Sprintf("%s/end_turn=%v", job.name, script.endTurn), func(t *testing.T) {
				if got, _, msgs := runJob(t, job, script.model()); got != completed {
					t.Fatalf("the competent society: %s; user received %q", got, msgs)
				}
			})
		}
	}
}

// TestMisbehavingModels runs each job with each personality mixed into an
// otherwise competent society, prints the outcome table and fails on a
// silent stall or a quiet report that names no agent.
func TestMisbehavingModels(t *testing.T) {
	// Where each personality goes: into the lead when it concerns what a
	// lead does, and into the workers (one translator in five) when it
	// concerns what anyone does.
	targets := map[string]string{
		"spawns-silently": "lead",
		"polls":           "lead",
		"acknowledges":    "lead",
		"prose":           "lead+workers",
		"wrong-keys":      "lead+workers",
		"pastes":          "workers",
		"invents-ids":     "workers",
		"truncates":       "lead+workers",
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-16s %-13s %-16s %s\n", "personality", "mixed into", "job", "outcome")
	for _, p := range llmtest.Personalities() {
		target, ok := targets[p.Name]
		if !ok {
			t.Fatalf("personality %s has no target", p.Name)
		}
		for _, job := range suiteJobs {
			t.Run(p.Name+"/"+job.name, func(t *testing.T) {
				competent := jobModel()
				affected := func(req *llm.Request) bool {
					return strings.Contains(target, "lead") && isLead(req) || strings.Contains(target, "workers") && job.worker(req)
				}
				got, named, msgs := runJob(t, job, llmtest.Mix(competent, p.Wrap(competent), affected))
				how := ""
				switch got {
				case reported:
					how = "naming " + strings.Join(named, " ")
				case quietUnnamed:
					how = "a quiet report naming nobody"
				case stalled:
					how = "user told nothing"
				}
				fmt.Fprintf(&table, "%-16s %-13s %-16s %-16s %3d model calls  %s\n", p.Name, target, job.name, got, competent.Calls(), how)
				switch got {
				case stalled:
					t.Errorf("%s in the %s: the society went quiet and user was told nothing; user received %q", p.Name, target, msgs)
				case quietUnnamed:
					t.Errorf("%s in the %s: user was told the task went quiet, but not which agent stopped it; user received %q", p.Name, target, msgs)
				}
			})
		}
	}
	t.Log(table.String())
}
