package agentsociety

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"agentsociety/internal/prompts"
	"agentsociety/llm"
)

// Language selects the set of model-facing text a society uses: the system
// prompts, the tool descriptions, the framing of messages (see
// FormatMessage), the markers of a trimmed history, the handoff notice and
// the reports the society writes itself (a task gone quiet or stalled, a
// request stuck, a budget run out). Error messages in tool results, and
// the report of a failed turn, which quotes one, are English in every
// language; their codes are what a model acts on.
type Language string

// The languages that ship. The zero Language is Chinese, the language of the
// seeds and of Requirement 10's strings.
const (
	Chinese Language = "zh"
	English Language = "en"
)

// language is a society's model-facing text, loaded once: its prompts, its
// short strings, and the built-in tools as its models see them.
type language struct {
	*prompts.Set
	tools  []llm.Tool // the built-in tools, in the order of builtins
	elided string     // what replaces a tool result elided from a long turn
	// asciiFrame is set when the source line is framed by ASCII brackets
	// (as English's is): a role name then shows none (see shownRole).
	asciiFrame bool
}

// loadLanguage loads lang's text, each file from override when it has the
// file.
func loadLanguage(lang Language, override fs.FS) (*language, error) {
	set, err := prompts.Load(string(lang), override)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(map[string]string{"elided": set.Strings.ElidedResult})
	l := &language{Set: set, elided: string(b)}
	frame := strings.NewReplacer("{role}", "", "{id}", "").Replace(set.Strings.Source)
	l.asciiFrame = strings.ContainsAny(frame, "()[]")
	texts := set.Strings.Tools
	for name := range texts {
		if builtinNamed(name) == nil {
			return nil, fmt.Errorf("prompts: %s: there is no built-in tool %q", prompts.StringsFile, name)
		}
	}
	for _, b := range builtins {
		text, ok := texts[b.name]
		if !ok || text.Description == "" {
			return nil, fmt.Errorf("prompts: %s: the tool %s has no description", prompts.StringsFile, b.name)
		}
		var params strings.Builder
		prompts.Expand(&params, b.params, jsonStrings(text.Parameters)...)
		if !json.Valid([]byte(params.String())) {
			return nil, fmt.Errorf("prompts: %s: the parameters of %s lack a description", prompts.StringsFile, b.name)
		}
		l.tools = append(l.tools, llm.Tool{Name: b.name, Description: text.Description, Parameters: json.RawMessage(params.String())})
	}
	return l, nil
}

// jsonStrings returns the parameter descriptions as name, value pairs for
// prompts.Expand, each value a JSON string.
func jsonStrings(descriptions map[string]string) []string {
	var out []string
	for name, d := range descriptions {
		b, _ := json.Marshal(d)
		out = append(out, name, string(b))
	}
	return out
}

// chinese is the default language, which FormatMessage and FormatBrief use.
var chinese = sync.OnceValue(func() *language {
	l, err := loadLanguage(Chinese, nil)
	if err != nil {
		panic("agentsociety: the embedded Chinese prompts do not load: " + err.Error())
	}
	return l
})

// expand returns tmpl with its placeholders filled in (see prompts.Expand).
func expand(tmpl string, vals ...string) string {
	var b strings.Builder
	prompts.Expand(&b, tmpl, vals...)
	return b.String()
}

// summary returns the message that stands for the trimmed turns of a
// history, given their summary.
func (l *language) summary(text string) string { return l.Strings.Summary + "\n" + text }

// dropped returns the marker saying that n messages were trimmed.
func (l *language) dropped(n int) string { return expand(l.Strings.Dropped, "n", itoa(n)) }

// taskLead returns the line that ends each message root reads on task:
// it names the task's lead, of role role, or says it has none when lead is
// "". The task id is shown as a role name is: on one line, without the
// brackets that close the line.
func (l *language) taskLead(task, lead, role string) string {
	task = l.shownRole(task)
	if lead == "" {
		return expand(l.Strings.TaskNoLead, "task", task)
	}
	return expand(l.Strings.TaskLead, "task", task, "id", lead, "role", l.shownRole(role))
}

// failureReport returns the text of the report that handling message m
// failed with err.
func (l *language) failureReport(m Message, err error) string {
	return expand(l.Strings.FailureReport, "message", m.ID, "from", m.From, "error", firstLine(err.Error()))
}

// quietReport returns the text of the report that task went quiet: mute
// names the agents whose last turn ended in words that reached nobody,
// with those words; waiting, when nobody did, the agents that have not
// reported.
func (l *language) quietReport(task string, mute map[string]string, waiting []string, roleOf func(string) string) string {
	var b strings.Builder
	b.WriteString(expand(l.Strings.Quiet, "task", task))
	for _, id := range slices.Sorted(maps.Keys(mute)) {
		b.WriteString("\n" + expand(l.Strings.QuietMute, "id", id, "role", l.shownRole(roleOf(id)), "words", clip(mute[id], 300)))
	}
	for _, id := range waiting {
		b.WriteString("\n" + expand(l.Strings.QuietWaiting, "id", id, "role", l.shownRole(roleOf(id))))
	}
	return b.String()
}

// parent returns how the runtime facts show a parent.
func (l *language) parent(id, role string) string {
	return expand(l.Strings.Parent, "id", id, "role", l.shownRole(role))
}
