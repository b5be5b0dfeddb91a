package agentsociety

import (
	"bytes"
	"encoding/json"
	"strings"
)

// FormatMessage renders m as an agent sees it (Requirement 10): a source
// line, the content, and for any sender but user a reply hint:
//
//	【来自 {senderRole}（{sender id}）的消息】
//	{content}
//	如需回复，请使用 send_message(to='{sender id}', ...)
//
// A message from user opens with 【来自用户的消息】 and has no hint. The
// content is the payload's "text" when it has one, else the payload rendered
// as indented JSON; a typed message (not general) also shows its type and its
// fields other than text, since those are what the receiver must act on.
func FormatMessage(m Message, senderRole string) string {
	return formatMessage(m, senderRole, true)
}

// formatMessage is FormatMessage, with the reply hint only if hint is set:
// the hint is for agents, not for the person at the user's console.
func formatMessage(m Message, senderRole string, hint bool) string {
	var b strings.Builder
	if m.From == UserID {
		b.WriteString("【来自用户的消息】\n")
	} else {
		b.WriteString("【来自 ")
		b.WriteString(senderRole)
		b.WriteString("（")
		b.WriteString(m.From)
		b.WriteString("）的消息】\n")
	}
	b.WriteString(messageContent(m))
	if hint && m.From != UserID {
		b.WriteString("\n如需回复，请使用 send_message(to='")
		b.WriteString(m.From)
		b.WriteString("', ...)")
	}
	return b.String()
}

// Format renders m as FormatMessage does, with the sender's role name looked
// up in the society.
func (s *Society) Format(m Message) string { return FormatMessage(m, s.roleNameOf(m.From)) }

// roleNameOf returns the role name of agent id, or "unknown" for an agent
// the society does not have.
func (s *Society) roleNameOf(id string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if a := s.agents[id]; a != nil {
		return a.roleName
	}
	return "unknown"
}

func messageContent(m Message) string {
	var f map[string]json.RawMessage
	if json.Unmarshal(m.Payload, &f) != nil {
		return string(m.Payload)
	}
	var text string
	hasText := f["text"] != nil && json.Unmarshal(f["text"], &text) == nil
	if hasText && (m.Type == General || m.Type == "") {
		return text
	}
	if hasText {
		delete(f, "text")
	}
	var b strings.Builder
	if hasText {
		b.WriteString(text)
		b.WriteString("\n")
	}
	if m.Type != General && m.Type != "" {
		b.WriteString("message_type: ")
		b.WriteString(string(m.Type))
		b.WriteString("\n")
	}
	b.WriteString(indentJSON(f))
	return b.String()
}

// indentJSON renders v as JSON indented by two spaces, without escaping
// HTML characters or non-ASCII text, so that it reads as written.
func indentJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "(unrenderable payload)"
	}
	return strings.TrimRight(buf.String(), "\n")
}

// FormatBrief renders a Task Brief as it is shown in the initial context of
// the agent it was given to: every field that is set, in a stable order,
// one labelled section each.
func FormatBrief(b *TaskBrief) string {
	if b == nil {
		return ""
	}
	var w strings.Builder
	field := func(label, v string) {
		if v != "" {
			w.WriteString(label + ": " + v + "\n")
		}
	}
	list := func(label string, items []string) {
		if items == nil {
			return
		}
		w.WriteString(label + ":\n")
		if len(items) == 0 {
			w.WriteString("  (none)\n")
		}
		for _, it := range items {
			w.WriteString("  - " + it + "\n")
		}
	}
	field("objective", b.Objective)
	list("constraints", b.Constraints)
	field("inputs", b.Inputs)
	field("outputs", b.Outputs)
	field("completion_criteria", b.CompletionCriteria)
	if len(b.Collaborators) > 0 {
		w.WriteString("collaborators:\n")
		for _, c := range b.Collaborators {
			w.WriteString("  - " + c.AgentID)
			if c.Role != "" {
				w.WriteString(" (" + c.Role + ")")
			}
			if c.Description != "" {
				w.WriteString(": " + c.Description)
			}
			w.WriteString("\n")
			if c.InterfaceSpec != nil {
				w.WriteString("    interface: " + oneLineJSON(c.InterfaceSpec) + "\n")
			}
		}
	}
	list("references", b.References)
	field("priority", b.Priority)
	return strings.TrimRight(w.String(), "\n")
}

func oneLineJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimRight(buf.String(), "\n")
}
