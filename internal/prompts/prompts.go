// Package prompts holds the society's default prompts, one set per
// language, and assembles an agent's system prompt from them.
//
// Each language is a directory of embedded files: base.txt, root.txt,
// runtime.tmpl and strings.json (the short strings: the message framing,
// the history markers, the handoff notice, the tool descriptions). A host
// may override any file by name with its own fs.FS (a directory such as
// data/prompts, through os.DirFS), on top of the language it chose;
// strings.json is overridden key by key.
package prompts

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"text/template"
	"text/template/parse"
	"unicode/utf8"
)

//go:embed zh en
var defaults embed.FS

// The languages that ship.
const (
	Chinese = "zh"
	English = "en"
)

// The file names a host may override.
const (
	BaseFile    = "base.txt"
	RootFile    = "root.txt"
	RuntimeFile = "runtime.tmpl"
	StringsFile = "strings.json"
)

// Strings are the short model-facing strings of a language. A string may
// hold placeholders, written {name}, which Expand fills in; each field says
// which it may hold.
type Strings struct {
	// RoleHeading opens the role prompt in the system prompt.
	RoleHeading string `json:"role_heading"`
	// Parent shows an agent's parent in the runtime facts: {id}, {role}.
	Parent string `json:"parent"`
	// ListSeparator joins agent ids in the runtime facts.
	ListSeparator string `json:"list_separator"`
	// Source is the first line of a message from an agent: {role}, {id}.
	Source string `json:"source"`
	// UserSource is the first line of a message from user.
	UserSource string `json:"user_source"`
	// ReplyHint is the last line of a message from an agent: {id}.
	ReplyHint string `json:"reply_hint"`
	// Summary opens the summary of the turns trimmed from a history.
	Summary string `json:"summary"`
	// Dropped says how many messages were trimmed from a history: {n}.
	Dropped string `json:"dropped"`
	// ElidedResult replaces a tool result elided from a long turn.
	ElidedResult string `json:"elided_result"`
	// Handoff is the text of the message an agent being terminated gets.
	Handoff string `json:"handoff"`
	// FailureReport is the text of the status_report that says a turn
	// failed: {message}, {from}, {error}.
	FailureReport string `json:"failure_report"`
	// Quiet opens the report to user of a task that went quiet without an
	// answer: {task}.
	Quiet string `json:"quiet"`
	// QuietMute names an agent whose last turn ended in words that reached
	// nobody: {id}, {role}, {words}.
	QuietMute string `json:"quiet_mute"`
	// QuietWaiting names an agent of the task that has not reported to its
	// parent: {id}, {role}.
	QuietWaiting string `json:"quiet_waiting"`
	// BudgetRaised is the note an agent stopped by a budget that ran out
	// is sent when the host raises it, so that it goes on.
	BudgetRaised string `json:"budget_raised"`
	// BudgetTask reports to user that a task's budget ran out: {task},
	// {what} (the figure that ran out), {calls}, {input}, {output} (what
	// was spent).
	BudgetTask string `json:"budget_task"`
	// BudgetAgent reports to an agent's parent that its share ran out:
	// {id}, {what}, {calls}, {input}, {output}.
	BudgetAgent string `json:"budget_agent"`
	// Stalled reports to user a task with work in flight and no message
	// handled for a while: {task}, {after} (how long), {agents} (the
	// StalledAgent lines, joined by "; ").
	Stalled string `json:"stalled"`
	// StalledAgent names an agent a stalled task waits for: {id}, {role},
	// {queued} (how many messages it has queued).
	StalledAgent string `json:"stalled_agent"`
	// StalledChild reports to its parent an agent that has handled no
	// message for a while: {id}, {task}, {after}, {queued}.
	StalledChild string `json:"stalled_child"`
	// StuckRequest reports to the requester's parent a collaboration
	// request without a timeout that has waited long: {from}, {to},
	// {request}, {after}.
	StuckRequest string `json:"stuck_request"`
	// TaskLead ends each message root reads on a task that has a lead:
	// {task}, {id}, {role}. Root's system prompt does not list its leads,
	// one per task ever submitted, which would grow for the life of the
	// society: this line tells it the one the message is about.
	TaskLead string `json:"task_lead"`
	// TaskNoLead ends each message root reads on a task without a lead:
	// {task}.
	TaskNoLead string `json:"task_no_lead"`
	// Tools are the built-in tools' texts, by tool name. A host's
	// strings.json replaces a tool's entry whole.
	Tools map[string]ToolText `json:"tools"`
}

// ToolText is what a model reads of a built-in tool.
type ToolText struct {
	Description string `json:"description"`
	// Parameters are the descriptions of parameters, by name.
	Parameters map[string]string `json:"parameters,omitempty"`
}

// placeholders lists, for each string that may hold placeholders, those it
// may hold; a string not listed may hold none.
func (s *Strings) placeholders() []struct {
	name, value string
	allowed     []string
} {
	return []struct {
		name, value string
		allowed     []string
	}{
		{"role_heading", s.RoleHeading, nil},
		{"parent", s.Parent, []string{"id", "role"}},
		{"list_separator", s.ListSeparator, nil},
		{"source", s.Source, []string{"role", "id"}},
		{"user_source", s.UserSource, nil},
		{"reply_hint", s.ReplyHint, []string{"id"}},
		{"summary", s.Summary, nil},
		{"dropped", s.Dropped, []string{"n"}},
		{"elided_result", s.ElidedResult, nil},
		{"handoff", s.Handoff, nil},
		{"failure_report", s.FailureReport, []string{"message", "from", "error"}},
		{"quiet", s.Quiet, []string{"task"}},
		{"quiet_mute", s.QuietMute, []string{"id", "role", "words"}},
		{"quiet_waiting", s.QuietWaiting, []string{"id", "role"}},
		{"budget_raised", s.BudgetRaised, nil},
		{"budget_task", s.BudgetTask, []string{"task", "what", "calls", "input", "output"}},
		{"budget_agent", s.BudgetAgent, []string{"id", "what", "calls", "input", "output"}},
		{"stalled", s.Stalled, []string{"task", "after", "agents"}},
		{"stalled_agent", s.StalledAgent, []string{"id", "role", "queued"}},
		{"stalled_child", s.StalledChild, []string{"id", "task", "after", "queued"}},
		{"stuck_request", s.StuckRequest, []string{"from", "to", "request", "after"}},
		{"task_lead", s.TaskLead, []string{"task", "id", "role"}},
		{"task_no_lead", s.TaskNoLead, []string{"task"}},
	}
}

// check reports a string that is empty or holds a placeholder it may not.
func (s *Strings) check() error {
	for _, f := range s.placeholders() {
		if f.value == "" {
			return fmt.Errorf("prompts: %s: %s is empty", StringsFile, f.name)
		}
		for rest := f.value; ; {
			name, after, ok := nextPlaceholder(rest)
			if !ok {
				break
			}
			known := false
			for _, a := range f.allowed {
				known = known || a == name
			}
			if !known {
				return fmt.Errorf("prompts: %s: %s holds {%s}, which it may not", StringsFile, f.name, name)
			}
			rest = after
		}
	}
	return nil
}

// nextPlaceholder finds the first placeholder in s: a name of lower-case
// letters and '_' between braces.
func nextPlaceholder(s string) (name, after string, ok bool) {
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			return "", "", false
		}
		j := i + 1
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] == '_') {
			j++
		}
		if j > i+1 && j < len(s) && s[j] == '}' {
			return s[i+1 : j], s[j+1:], true
		}
		s = s[i+1:]
	}
}

// Expand writes tmpl to w with each placeholder {name} replaced by its
// value, given as name, value pairs. It makes one pass: a value is written
// as it is, even if it holds something shaped like a placeholder. A
// placeholder without a value is written as it is.
func Expand(w *strings.Builder, tmpl string, vals ...string) {
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			w.WriteString(tmpl)
			return
		}
		w.WriteString(tmpl[:i])
		rest := tmpl[i:]
		matched := false
		for k := 0; k+1 < len(vals); k += 2 {
			if n := len(vals[k]); len(rest) >= n+2 && rest[n+1] == '}' && rest[1:n+1] == vals[k] {
				w.WriteString(vals[k+1])
				tmpl = rest[n+2:]
				matched = true
				break
			}
		}
		if !matched {
			w.WriteByte('{')
			tmpl = rest[1:]
		}
	}
}

// Set is a loaded set of prompts. Its prompts are fixed when it is loaded,
// and it is safe for concurrent use.
type Set struct {
	base, root string
	runtime    *template.Template
	// Strings are the set's short strings: read them, do not change them.
	Strings Strings

	// byID is set when the runtime template uses the id only to show it
	// (see idOnlyShown), so that the system prompt of agents alike but for
	// their id is the last one assembled with the id replaced (see System).
	byID bool
	last atomic.Pointer[assembled]
}

// assembled is a system prompt System assembled, with idMark for the id.
type assembled struct {
	isRoot     bool
	rolePrompt string
	facts      Facts // with ID ""
	text       string
}

// idMark stands for the id in a system prompt kept for agents alike but
// for their id. A NUL is in no id, and System does not keep a prompt whose
// facts hold one.
const idMark = "\x00id\x00"

// Load reads the prompts of lang (Chinese or English; "" means Chinese),
// each file from override when it has the file and from the embedded
// defaults of lang otherwise; a strings.json in override replaces the
// default strings key by key. A nil override means the defaults.
func Load(lang string, override fs.FS) (*Set, error) {
	if lang == "" {
		lang = Chinese
	}
	if lang != Chinese && lang != English {
		return nil, fmt.Errorf("prompts: no prompts for language %q", lang)
	}
	readDefault := func(name string) ([]byte, error) { return defaults.ReadFile(path.Join(lang, name)) }
	readOverride := func(name string) ([]byte, error) {
		if override == nil {
			return nil, nil
		}
		b, err := fs.ReadFile(override, name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("prompts: reading %s: %w", name, err)
		}
		return b, nil
	}
	read := func(name string) (string, error) {
		b, err := readOverride(name)
		if err != nil || b != nil {
			return string(b), err
		}
		b, err = readDefault(name)
		return string(b), err
	}
	var s Set
	var err error
	if s.base, err = read(BaseFile); err != nil {
		return nil, err
	}
	if s.root, err = read(RootFile); err != nil {
		return nil, err
	}
	rt, err := read(RuntimeFile)
	if err != nil {
		return nil, err
	}
	if s.runtime, err = template.New(RuntimeFile).Option("missingkey=error").Parse(rt); err != nil {
		return nil, fmt.Errorf("prompts: %s: %w", RuntimeFile, err)
	}
	def, err := readDefault(StringsFile)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(def, &s.Strings); err != nil {
		return nil, fmt.Errorf("prompts: %s/%s: %w", lang, StringsFile, err)
	}
	over, err := readOverride(StringsFile)
	if err != nil {
		return nil, err
	}
	if over != nil {
		dec := json.NewDecoder(bytes.NewReader(over))
		dec.DisallowUnknownFields() // a misspelt key would be ignored silently
		if err := dec.Decode(&s.Strings); err != nil {
			return nil, fmt.Errorf("prompts: %s: %w", StringsFile, err)
		}
	}
	if err := s.Strings.check(); err != nil {
		return nil, err
	}
	// A template that parses can still fail on every agent (a field Facts
	// does not have): run it once now, so that New reports it rather than
	// every turn.
	sample := Facts{ID: "agent-1", Role: "r", Parent: "root", ReportTo: "user", TaskID: "t", MaxSteps: 1, Assigned: true, Budget: "model_calls 1",
		Contacts:   []Contact{{ID: "root", Role: "root", Source: "parent", IntroducedBy: "x", Note: "n"}},
		Children:   []Children{{Role: "r", Reported: "agent-2", Waiting: "agent-3"}},
		Interfaces: []Interface{{Role: "r", Spec: "{}"}}}
	if _, err := s.assemble(false, "p", sample); err != nil {
		return nil, err
	}
	s.byID = true
	for _, t := range s.runtime.Templates() {
		s.byID = s.byID && (t.Tree == nil || idOnlyShown(t.Tree.Root))
	}
	return &s, nil
}

// idOnlyShown reports whether the template below n uses a field named ID
// only to show it, as written ({{.ID}} or {{$.ID}}): never in a condition,
// a function's argument or a variable, where its value could change what
// the template writes.
func idOnlyShown(n parse.Node) bool {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return true
		}
		for _, c := range n.Nodes {
			if !idOnlyShown(c) {
				return false
			}
		}
		return true
	case *parse.ActionNode:
		return idShown(n.Pipe) || !usesID(n.Pipe)
	case *parse.IfNode:
		return !usesID(n.Pipe) && idOnlyShown(n.List) && idOnlyShown(n.ElseList)
	case *parse.RangeNode:
		return !usesID(n.Pipe) && idOnlyShown(n.List) && idOnlyShown(n.ElseList)
	case *parse.WithNode:
		return !usesID(n.Pipe) && idOnlyShown(n.List) && idOnlyShown(n.ElseList)
	case *parse.TemplateNode:
		return !usesID(n.Pipe) // the template it runs is checked on its own
	}
	return true // text, comments, break and continue
}

// idShown reports whether p is a field named ID and nothing else.
func idShown(p *parse.PipeNode) bool {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return slices.Equal(a.Ident, []string{"ID"})
	case *parse.VariableNode:
		return slices.Equal(a.Ident, []string{"$", "ID"})
	}
	return false
}

// usesID reports whether p mentions a field named ID anywhere, or dot or
// $ whole (which hold the id, and could show it other than as written).
func usesID(p *parse.PipeNode) bool {
	if p == nil {
		return false
	}
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			switch a := a.(type) {
			case *parse.DotNode:
				return true
			case *parse.FieldNode:
				if slices.Contains(a.Ident, "ID") {
					return true
				}
			case *parse.VariableNode:
				if len(a.Ident) == 1 || slices.Contains(a.Ident, "ID") {
					return true
				}
			case *parse.ChainNode:
				if slices.Contains(a.Field, "ID") {
					return true
				}
				if inner, ok := a.Node.(*parse.PipeNode); ok && usesID(inner) {
					return true
				}
			case *parse.PipeNode:
				if usesID(a) {
					return true
				}
			}
		}
	}
	return false
}

// Facts are the runtime facts of an agent that its system prompt carries.
// Nothing in them grows with the organisation faster than a few words per
// agent: an interface is shown once per role, children once per role.
type Facts struct {
	ID, Role, TaskID string
	Parent           string // the parent as Strings.Parent shows it, "" for root
	ReportTo         string // whom the agent reports its result to: user for a lead, else its parent's id
	MaxSteps         int    // the model calls a turn may make
	Budget           string // what the agent may still spend, "" when nothing limits it
	Assigned         bool   // the agent's first message is its brief
	Contacts         []Contact
	Children         []Children
	Interfaces       []Interface
}

// Contact is one contact other than a child, as the prompt shows it.
type Contact struct {
	ID, Role, Source, IntroducedBy, Note string
}

// Children are an agent's children on one role: the ids, joined by
// Strings.ListSeparator, of those that have reported and of those that have
// not.
type Children struct {
	Role, Reported, Waiting string
}

// Interface is a role's Interface Spec, as one line of JSON.
type Interface struct {
	Role, Spec string
}

// System assembles the system prompt: base, then root.txt for root or the
// role prompt for any other agent, then the runtime facts.
//
// Agents spawned together on one role (the children of a fan-out) have the
// same facts but for their ids. When the runtime template uses the id only
// to show it, as written, which Load checks in the template's parse tree
// (never in a condition, a function's argument or a variable), System keeps
// the last prompt it assembled
// with a mark for the id, and gives an agent whose facts are the same but
// for the id that prompt with its own id in place of the mark.
func (s *Set) System(isRoot bool, rolePrompt string, f Facts) (string, error) {
	id := f.ID
	if !s.byID || id == "" || strings.TrimSpace(id) != id || strings.IndexByte(id, 0) >= 0 || !utf8.ValidString(id) {
		// An id at either end of the prompt would be trimmed with it, and
		// half a rune at its end could be trimmed with what follows.
		return s.assemble(isRoot, rolePrompt, f)
	}
	f.ID = ""
	if last := s.last.Load(); last != nil && last.isRoot == isRoot && last.rolePrompt == rolePrompt && sameFacts(&last.facts, &f) {
		return strings.ReplaceAll(last.text, idMark, id), nil
	}
	if marked(rolePrompt, &f) {
		f.ID = id
		return s.assemble(isRoot, rolePrompt, f)
	}
	f.ID = idMark
	text, err := s.assemble(isRoot, rolePrompt, f)
	if err != nil {
		return "", err
	}
	f.ID = ""
	s.last.Store(&assembled{isRoot: isRoot, rolePrompt: rolePrompt, facts: f, text: text})
	return strings.ReplaceAll(text, idMark, id), nil
}

// assemble is System without its cache.
func (s *Set) assemble(isRoot bool, rolePrompt string, f Facts) (string, error) {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(s.base))
	b.WriteString("\n\n")
	if isRoot {
		b.WriteString(strings.TrimSpace(s.root))
	} else if p := strings.TrimSpace(rolePrompt); p != "" {
		b.WriteString(s.Strings.RoleHeading)
		b.WriteString("\n")
		b.WriteString(p)
	}
	b.WriteString("\n\n")
	if err := s.runtime.Execute(&b, f); err != nil {
		return "", fmt.Errorf("prompts: %s: %w", RuntimeFile, err)
	}
	return strings.TrimSpace(b.String()), nil
}

// sameFacts reports whether a and b are the same facts.
func sameFacts(a, b *Facts) bool {
	return a.ID == b.ID && a.Role == b.Role && a.TaskID == b.TaskID && a.Parent == b.Parent &&
		a.ReportTo == b.ReportTo && a.MaxSteps == b.MaxSteps && a.Budget == b.Budget && a.Assigned == b.Assigned &&
		slices.Equal(a.Contacts, b.Contacts) && slices.Equal(a.Children, b.Children) && slices.Equal(a.Interfaces, b.Interfaces)
}

// marked reports whether the role prompt or a fact holds a NUL, which
// could be taken for part of idMark.
func marked(rolePrompt string, f *Facts) bool {
	texts := []string{rolePrompt, f.ID, f.Role, f.TaskID, f.Parent, f.ReportTo, f.Budget}
	for _, c := range f.Contacts {
		texts = append(texts, c.ID, c.Role, c.Source, c.IntroducedBy, c.Note)
	}
	for _, c := range f.Children {
		texts = append(texts, c.Role, c.Reported, c.Waiting)
	}
	for _, i := range f.Interfaces {
		texts = append(texts, i.Role, i.Spec)
	}
	return slices.ContainsFunc(texts, func(t string) bool { return strings.IndexByte(t, 0) >= 0 })
}
