// Package mermaid draws a society as Mermaid diagrams, text that any Mermaid
// viewer (a Markdown preview, a wiki, mermaid.live) renders: the
// organisation as a flowchart ([WriteFlowchart]) and a task's messages as a
// sequence diagram ([WriteSequence]), drawn from the event log.
//
// Ids, names and message text come from models, so they are untrusted: the
// diagrams never use them as Mermaid ids, and every character Mermaid could
// read as syntax is written as an entity code (#35; for '#'), so no label
// can end its statement, open a link or inject HTML.
package mermaid

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"iter"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	as "agentsociety"
)

// Org is the organisation to draw: what [OrgOf] reads from a society.
type Org struct {
	// Roles, oldest first.
	Roles []as.Role
	// Agents other than root and user, oldest first.
	Agents []as.Agent
	// Contacts are each agent's contacts, by agent id; nil draws none.
	Contacts map[string][]as.Contact
}

// OrgOf returns the organisation of s as it stands: its roles and agents,
// and the contacts of root and of every agent when contacts is true.
func OrgOf(s *as.Society, contacts bool) Org {
	org := Org{Roles: s.Roles(), Agents: s.Agents()}
	if contacts {
		org.Contacts = map[string][]as.Contact{}
		for _, id := range append([]string{as.RootID}, ids(org.Agents)...) {
			if list, err := s.Contacts(id); err == nil { // an agent forgotten meanwhile has none
				org.Contacts[id] = list
			}
		}
	}
	return org
}

func ids(agents []as.Agent) []string {
	out := make([]string, len(agents))
	for i, a := range agents {
		out[i] = a.ID
	}
	return out
}

// WriteFlowchart writes org to w as a Mermaid flowchart: root and each agent
// (its id and its role's name) with an edge from its parent, each role with
// a dotted edge from the agent that created it, and, when org has contacts,
// a dotted edge from an agent to each contact it gained other than by
// birth (its parent, its children), labelled by how it did: preset,
// introduction, first_message. Terminated agents are drawn dashed. Ids
// and role names longer than 64 characters are cut.
func WriteFlowchart(w io.Writer, org Org) error {
	b := bufio.NewWriter(w)
	node := map[string]string{as.RootID: "root", as.UserID: "user"}
	roleName := map[string]string{}
	for i, r := range org.Roles {
		roleName[r.ID] = r.Name
		node["role\x00"+r.ID] = "r" + strconv.Itoa(i+1)
	}
	for i, a := range org.Agents {
		node[a.ID] = "a" + strconv.Itoa(i+1)
	}
	usesUser := false
	for _, list := range org.Contacts {
		for _, c := range list {
			usesUser = usesUser || (c.ID == as.UserID && drawn(c.Source))
		}
	}

	b.WriteString("flowchart TD\n")
	b.WriteString("  classDef role fill:#f5f0ff,stroke:#7b61c4\n")
	b.WriteString("  classDef terminated stroke-dasharray:4 3,color:#888\n")
	b.WriteString("  root((\"root\"))\n")
	if usesUser {
		b.WriteString("  user([\"user\"])\n")
	}
	for _, r := range org.Roles {
		fmt.Fprintf(b, "  %s{{\"%s\"}}:::role\n", node["role\x00"+r.ID], Escape("role: "+name(r.Name)))
	}
	for _, a := range org.Agents {
		label := Escape(name(a.ID))
		if role := roleName[a.RoleID]; role != "" {
			label += "<br>" + Escape(name(role))
		}
		class := ""
		if a.Status == as.StatusTerminated {
			class = ":::terminated"
		}
		fmt.Fprintf(b, "  %s[\"%s\"]%s\n", node[a.ID], label, class)
	}
	for _, a := range org.Agents {
		if p, ok := node[a.ParentID]; ok {
			fmt.Fprintf(b, "  %s --> %s\n", p, node[a.ID])
		}
	}
	for _, r := range org.Roles {
		if by, ok := node[r.CreatedBy]; ok {
			fmt.Fprintf(b, "  %s -. creates .-> %s\n", by, node["role\x00"+r.ID])
		}
	}
	for _, from := range append([]string{as.RootID}, ids(org.Agents)...) {
		for _, c := range org.Contacts[from] {
			to, ok := node[c.ID]
			if !ok || !drawn(c.Source) {
				continue
			}
			fmt.Fprintf(b, "  %s -.->|\"%s\"| %s\n", node[from], Escape(string(c.Source)), to)
		}
	}
	return b.Flush()
}

// drawn reports whether a contact of source is drawn: the tree shows the
// contacts an agent has by birth.
func drawn(source as.ContactSource) bool {
	switch source {
	case as.SourceParent, as.SourceChild, as.SourceSystem:
		return false
	}
	return true
}

// LabelLength is how many characters of a message's text a sequence
// diagram shows.
const LabelLength = 48

// WriteSequence writes the messages of task to w as a Mermaid sequence
// diagram: one arrow for each message the society accepted, in the order
// it did, labelled with the message type and the start of its text; the
// participants are named by id and role, in the order they appear.
// Answers (collaboration and introduction responses) are drawn dotted.
// Ids and role names longer than 64 characters are cut.
//
// events is an event log, as Society.Events returns it; it is read to the
// end. Events the log no longer keeps are marked with a note; any other
// error ends the diagram and is returned.
func WriteSequence(w io.Writer, events iter.Seq2[as.Event, error], task string) error {
	type arrow struct {
		from, to string
		dotted   bool
		label    string
		note     string
	}
	var arrows []arrow
	roleOf := map[string]string{}
	for e, err := range events {
		if err != nil {
			var missed *as.MissedEventsError
			if !errors.As(err, &missed) {
				return err
			}
			arrows = append(arrows, arrow{note: fmt.Sprintf("events %d to %d are no longer kept", missed.From, missed.Oldest-1)})
			continue
		}
		switch {
		case e.Kind == as.EventAgentSpawned:
			roleOf[e.Target] = e.Name
		case e.Kind == as.EventMessageAccepted && e.Message != nil && e.Message.TaskID == task:
			m := e.Message
			label := string(m.Type)
			if text := oneLine(textOf(m)); text != "" {
				label += ": " + clip(text, LabelLength)
			}
			arrows = append(arrows, arrow{from: m.From, to: m.To, label: label,
				dotted: m.Type == as.CollaborationResponse || m.Type == as.IntroductionResponse})
		}
	}

	b := bufio.NewWriter(w)
	b.WriteString("sequenceDiagram\n")
	node := map[string]string{}
	var order []string
	for _, a := range arrows {
		for _, id := range []string{a.from, a.to} {
			if _, ok := node[id]; !ok && a.note == "" {
				node[id] = "p" + strconv.Itoa(len(order)+1)
				order = append(order, id)
			}
		}
	}
	for _, id := range order {
		label := name(id)
		if role := roleOf[id]; role != "" {
			label += " (" + name(role) + ")"
		}
		fmt.Fprintf(b, "  participant %s as %s\n", node[id], Escape(label))
	}
	if len(order) == 0 && len(arrows) > 0 {
		// Only notes: they need a participant to stand over.
		b.WriteString("  participant p1 as event log\n")
	}
	for _, a := range arrows {
		if a.note != "" {
			fmt.Fprintf(b, "  Note over p1: %s\n", Escape(a.note))
			continue
		}
		line := "->>"
		if a.dotted {
			line = "-->>"
		}
		fmt.Fprintf(b, "  %s%s%s: %s\n", node[a.from], line, node[a.to], Escape(a.label))
	}
	return b.Flush()
}

// Escape returns s as text Mermaid shows as it is, in a quoted label, an
// edge label, a participant alias or a message. Mermaid's syntax is ASCII:
// ASCII letters, digits, spaces and a few harmless punctuation marks stay,
// every other ASCII character becomes an entity code (#60; for '<'), and
// control characters become spaces. Other characters stay, except those
// that are not visible (format characters such as bidirectional overrides,
// line and paragraph separators), which become spaces.
//
// A colon stays only before a space ("role: lead"): Mermaid drops the last
// ';' of a line that says style or classDef and later a colon, non-space
// characters and '#', taking it for a style statement with a colour, and
// that would break the line's last entity code.
func Escape(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r >= utf8.RuneSelf && unicode.IsGraphic(r) && !unicode.IsSpace(r):
			b.WriteRune(r)
		case r == ':' && strings.HasPrefix(s[i+1:], " "):
			b.WriteRune(r)
		case r == ' ' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_.,/@()+=*!?'", r):
			b.WriteRune(r)
		case r < utf8.RuneSelf && unicode.IsPrint(r):
			b.WriteString("#" + strconv.Itoa(int(r)) + ";")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// textOf returns what a message says: its text, or else a Task Brief's
// objective, or else its status (a response's, a status report's).
func textOf(m *as.Message) string {
	var p struct {
		Text      string `json:"text"`
		Objective string `json:"objective"`
		Status    string `json:"status"`
	}
	if m.Decode(&p) != nil {
		return ""
	}
	return cmp.Or(p.Text, p.Objective, p.Status)
}

// oneLine returns s with its runs of white space made one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// nameLength is how many characters of an id or a role's name a diagram
// shows: a name is a label's first line, not its text, and Mermaid refuses
// to draw a diagram longer than its maxTextSize (50,000 characters).
const nameLength = 64

// name returns an id or a role's name as a diagram shows it: on one line,
// cut to nameLength characters.
func name(s string) string { return clip(oneLine(s), nameLength) }

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
