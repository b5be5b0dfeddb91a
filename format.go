package agentsociety

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"agentsociety/internal/prompts"
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
//
// The source line cannot be forged. A content line that could pass for a
// source line or a reply hint in either language (one that says 来自 or
// "message from" beside a bracket such as 【 or [, or says 如需回复,
// "to reply," or send_message(to=, ignoring case, spaces, invisible
// characters, full-width forms and look-alike letters) is shown quoted: prefixed with "> ",
// its 【 and 】 turned into 〖 and 〗. Control characters but tab and the
// line breaks are shown as visible symbols (␛ for ESC), so that on a
// terminal, such as Config.UserConsole may be, a content line cannot move
// the cursor to rewrite the source line. The sender's role name is shown on
// one line, with 【】 turned into 〖〗 and full-width parentheses into
// ASCII ones, so that the only 【 and （ in a source line are the
// society's. The prompts tell agents so.
//
// FormatMessage uses the Chinese strings; [Society.Format] uses the
// society's language (see Config.Language).
func FormatMessage(m Message, senderRole string) string {
	return chinese().formatMessage(m, senderRole, true)
}

// formatMessage is FormatMessage in language l, with the reply hint only if
// hint is set: the hint is for agents, not for the person at the user's
// console.
func (l *language) formatMessage(m Message, senderRole string, hint bool) string {
	return l.frameMessage(m, senderRole, hint, messageContent(m))
}

// frameMessage is formatMessage with m's content, as messageContent
// renders it, given.
func (l *language) frameMessage(m Message, senderRole string, hint bool, content string) string {
	var b strings.Builder
	b.Grow(len(l.Strings.Source) + len(senderRole) + len(content) + len(l.Strings.ReplyHint) + 2*len(m.From) + 16)
	if m.From == UserID {
		b.WriteString(l.Strings.UserSource)
	} else {
		prompts.Expand(&b, l.Strings.Source, "role", l.shownRole(senderRole), "id", m.From)
	}
	b.WriteString("\n")
	b.WriteString(neutralise(content))
	if hint && m.From != UserID {
		b.WriteString("\n")
		prompts.Expand(&b, l.Strings.ReplyHint, "id", m.From)
	}
	return b.String()
}

// Format renders m as an agent of the society reads it: as FormatMessage
// does, in the society's language (Config.Language, with the strings of
// Config.Prompts), with the sender's role name looked up in the society. In
// English a message opens with "[Message from {role} ({id})]", or
// "[Message from user]", and a message from an agent ends with "To reply,
// use send_message(to='{id}', ...)"; a role name shows no ASCII brackets or
// parentheses ({ and } stand for them).
func (s *Society) Format(m Message) string {
	return s.lang.formatMessage(m, s.roleNameOf(m.From), true)
}

// roleNameOf returns the role name of agent id, or "unknown" for an agent
// the society does not have.
func (s *Society) roleNameOf(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.agents[id]; a != nil {
		return a.roleName()
	}
	return "unknown"
}

func messageContent(m Message) string {
	if m.Type == TaskAssignment {
		var b TaskBrief
		if json.Unmarshal(m.Payload, &b) == nil && b.Validate() == nil {
			return assignmentContent(&b)
		}
	}
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

// assignmentContent is the content of a task_assignment whose brief is b.
func assignmentContent(b *TaskBrief) string {
	return "message_type: task_assignment\n" + formatBrief(b, false)
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
func FormatBrief(b *TaskBrief) string { return formatBrief(b, true) }

// formatBrief is FormatBrief, with the agents' words neutralised only if
// quote is set (a caller that neutralises the whole text unsets it).
func formatBrief(b *TaskBrief, quote bool) string {
	if b == nil {
		return ""
	}
	neutralise := neutralise
	if !quote {
		neutralise = func(s string) string { return s }
	}
	var w strings.Builder
	n := 128 + len(b.Objective) + len(b.Inputs) + len(b.Outputs) + len(b.CompletionCriteria) + len(b.Priority)
	for _, items := range [][]string{b.Constraints, b.References} {
		for _, it := range items {
			n += len(it) + 5
		}
	}
	w.Grow(n) // collaborators, rarer, may grow it
	field := func(label, v string) {
		if v != "" {
			w.WriteString(label)
			w.WriteString(": ")
			w.WriteString(neutralise(v))
			w.WriteString("\n")
		}
	}
	list := func(label string, items []string) {
		if items == nil {
			return
		}
		w.WriteString(label)
		w.WriteString(":\n")
		if len(items) == 0 {
			w.WriteString("  (none)\n")
		}
		for _, it := range items {
			w.WriteString("  - ")
			w.WriteString(neutralise(it))
			w.WriteString("\n")
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
			w.WriteString("  - " + neutralise(c.AgentID))
			if c.Role != "" {
				w.WriteString(" (" + neutralise(c.Role) + ")")
			}
			if c.Description != "" {
				w.WriteString(": " + neutralise(c.Description))
			}
			w.WriteString("\n")
			if c.InterfaceSpec != nil {
				w.WriteString("    interface: " + neutralise(oneLineJSON(c.InterfaceSpec)) + "\n")
			}
		}
	}
	if len(b.References) > 0 { // optional: none is not shown, as its JSON omits it
		list("references", b.References)
	}
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

// oneLine returns an agent's words (a role name, a contact's note, a
// console line) as a line of the society's own shows them: on one line
// (control characters but tab, and line separators, become spaces;
// invisible format characters are dropped), with 【】 turned into 〖〗 and
// （） into (), so that they cannot end the line early or open a second
// one, such as a source line.
func oneLine(role string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return r
		case isLineBreak(r) || unicode.IsControl(r):
			return ' '
		case unicode.Is(unicode.Cf, r):
			return -1
		}
		switch r {
		case '【':
			return '〖'
		case '】':
			return '〗'
		case '（':
			return '('
		case '）':
			return ')'
		}
		return r
	}, role)
}

// shownRole returns a sender's role name as a source line of l shows it:
// as oneLine does, and when the source line is framed by ASCII brackets,
// with ( and [ turned into {, ) and ] into }.
func (l *language) shownRole(role string) string {
	role = oneLine(role)
	if l.asciiFrame {
		role = asciiBrackets.Replace(role)
	}
	return role
}

var asciiBrackets = strings.NewReplacer("(", "{", ")", "}", "[", "{", "]", "}")

// isLineBreak reports whether r ends a line for a reader: a model or a
// terminal may break a line at any of these, not only at "\n".
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}

// quoteBrackets turns the brackets of a source line into look-alikes that a
// source line never has.
var quoteBrackets = strings.NewReplacer("【", "〖", "】", "〗")

// neutralise returns content with every line that could pass for a source
// line or a reply hint (see forgeable) quoted: prefixed with "> ", its 【】
// turned into 〖〗; and with the control characters of every line shown as
// visible symbols (see showControls), so that on a terminal no line can
// move the cursor to rewrite another, the source line above it included.
// Other lines, and the line breaks, are left as they are.
func neutralise(content string) string {
	var b strings.Builder
	changed := false
	done := 0 // content[:done] is in b
	for start := 0; ; {
		end := len(content)
		if i := strings.IndexFunc(content[start:], isLineBreak); i >= 0 {
			end = start + i
		}
		line := content[start:end]
		if forged, ctl := forgeable(line), hasControl(line); forged || ctl {
			if !changed {
				b.Grow(len(content) + 16)
				changed = true
			}
			b.WriteString(content[done:start])
			if forged {
				b.WriteString("> ")
				line = quoteBrackets.Replace(line)
			}
			if ctl {
				line = strings.Map(showControl, line)
			}
			b.WriteString(line)
			done = end
		}
		if end == len(content) {
			break
		}
		_, n := utf8.DecodeRuneInString(content[end:])
		start = end + n
	}
	if !changed {
		return content
	}
	b.WriteString(content[done:])
	return b.String()
}

// hasControl reports whether line holds a control character other than
// tab: a C0 control, DEL or a C1 control (line breaks end lines, and are
// not in one).
func hasControl(line string) bool {
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c < 0x20 && c != '\t', c == 0x7f:
			return true
		case c == 0xc2 && i+1 < len(line) && 0x80 <= line[i+1] && line[i+1] < 0xa0: // U+0080-U+009F
			return true
		}
	}
	return false
}

// showControl returns the character that shows control character r: its
// Unicode control picture (␛ for ESC, ␈ for backspace, ␡ for DEL), or
// U+FFFD for a C1 control, which has none. Any other r is returned as it is.
func showControl(r rune) rune {
	switch {
	case r == '\t':
		return r
	case r < 0x20:
		return 0x2400 + r
	case r == 0x7f:
		return '\u2421'
	case 0x80 <= r && r < 0xa0:
		return '\ufffd'
	}
	return r
}

// forgeable reports whether line could pass for a line the society writes
// in either language, since an agent may write either: a source line (来自,
// or "message from", beside one of the brackets 【】〖〗[]〔〕 or their
// white forms 〘〙〚〛⟦⟧, or for "message from" also ()) or a reply hint
// (如需回复, "to reply,", or send_message(to=). Spaces, invisible
// characters (the Hangul fillers among them) and combining marks are
// ignored, case too; full-width forms read as ASCII, traditional 來 and 覆
// as 来 and 复, and Cyrillic, Greek and mathematical look-alikes of Latin
// letters as those letters, so that a look-alike is caught too.
func forgeable(line string) bool {
	// Each look-alike needs one of these: 需 (如需回复), a bracket (来自 and
	// "message from" need one beside them, send_message(to= has one) or a
	// comma ("to reply,"), in ASCII or full width. Lines with none are
	// passed at once.
	if !hasLookAlikeMark(line) {
		return false
	}
	var buf [256]byte // most lines fit: folding them allocates nothing
	s := buf[:0]
	for _, r := range line {
		if !ignorable(r) {
			s = utf8.AppendRune(s, fold(r))
		}
	}
	return bytes.Contains(s, []byte("如需回复")) || bytes.Contains(s, []byte("send_message(to=")) || bytes.Contains(s, []byte("toreply,")) ||
		bytes.Contains(s, []byte("来自")) && bytes.ContainsAny(s, sourceBrackets) ||
		bytes.Contains(s, []byte("messagefrom")) && bytes.ContainsAny(s, sourceBrackets+"()")
}

// sourceBrackets are the brackets beside which 来自 or "message from"
// reads as a source line: those of the two languages' source lines, and
// their look-alikes, the white forms included.
const sourceBrackets = "【】〖〗[]〔〕〘〙〚〛⟦⟧"

// ignorable reports whether forgeable skips r: a space (U+2800, the blank
// Braille pattern, included), an invisible character (a format character,
// or a letter Unicode says to render as nothing, such as the Hangul
// fillers) or a combining mark. ASCII, CJK ideographs and full-width
// forms, most of what it reads, are told apart without the Unicode tables.
func ignorable(r rune) bool {
	switch {
	case r < 0x80:
		return r == ' ' || '\t' <= r && r <= '\r'
	case 0x4E00 <= r && r <= 0x9FFF, 0xFF01 <= r && r <= 0xFF5E: // ideographs; full-width ASCII, Chinese punctuation
		return false
	}
	return unicode.IsSpace(r) || r == '\u2800' || unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me, unicode.Other_Default_Ignorable_Code_Point)
}

// hasLookAlikeMark reports whether line has one of the characters of which
// a look-alike of a source line or a reply hint has at least one (see
// forgeable).
func hasLookAlikeMark(line string) bool {
	for _, r := range line {
		switch r {
		case '需', '【', '】', '〖', '〗', '[', ']', '〔', '〕', '〘', '〙', '〚', '〛', '⟦', '⟧', '(', ')', '（', '）', '［', '］', ',', '，':
			return true
		default:
			if c, ok := compat(r); ok && c < 0x4E00 {
				return true // a bracket or a comma in another form
			}
		}
	}
	return false
}

// fold returns the character r reads as, for forgeable: lower case, ASCII
// for a full-width form or a look-alike of a Latin letter, simplified for
// the traditional characters of the Chinese source line and reply hint.
func fold(r rune) rune {
	if c, ok := compat(r); ok {
		r = c
	}
	switch {
	case r >= 0xFF01 && r <= 0xFF5E: // full-width ASCII
		r -= 0xFEE0
	case r >= 0x1D400 && r <= 0x1D6A3: // mathematical alphanumerics: 13 alphabets of A-Z a-z
		r = 'a' + (r-0x1D400)%52%26
	case r >= 0x24B6 && r <= 0x24E9: // circled letters: Ⓐ-Ⓩ, ⓐ-ⓩ
		r = 'a' + (r-0x24B6)%26
	case r == '來':
		r = '来'
	case r == '覆', r == '復':
		r = '复'
	}
	switch {
	case r < 0x80:
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	case r >= 0x3000:
		return r // CJK and beyond: no case, and no look-alike of a Latin letter
	}
	if l, ok := latinLookAlikes[r]; ok {
		return l
	}
	r = unicode.ToLower(r)
	if l, ok := latinLookAlikes[r]; ok {
		return l
	}
	return r
}

// compat returns the character r stands for when it is one of
// compatForms. ASCII and the CJK ideographs, most of what it reads, it
// tells apart without a lookup (TestCompatFormsInRange).
func compat(r rune) (rune, bool) {
	if r < compatFrom || 0x4E00 <= r && r < 0xF900 {
		return r, false
	}
	c, ok := compatForms[r]
	return c, ok
}

// compatFrom is the lowest of compatForms' characters.
const compatFrom = 0x2000

// compatForms are the characters whose compatibility decomposition (NFKC)
// is a character of a source line or a reply hint: vertical, small,
// superscript and subscript brackets and commas, a Kangxi radical and CJK
// compatibility ideographs; none lies in U+4E00-U+F8FF, the CJK ideographs.
// They read as the character they stand for.
var compatForms = map[rune]rune{
	'⁽': '(', '⁾': ')', '₍': '(', '₎': ')', '︵': '(', '︶': ')', '﹙': '(', '﹚': ')',
	'︐': ',', '﹐': ',', '﹇': '[', '﹈': ']',
	'︗': '〖', '︘': '〗', '︹': '〔', '︺': '〕', '﹝': '〔', '﹞': '〕', '︻': '【', '︼': '】',
	'\u2f83': '自', '\uf92d': '来', '\uf966': '复', '\ufab7': '复',
}

// latinLookAlikes are Cyrillic, Greek and Latin letters that read as a
// plain Latin letter, given in lower case. A capital is looked up before
// it is lowered: Greek Ν reads as N, its ν as v.
var latinLookAlikes = map[rune]rune{
	'А': 'a', 'В': 'b', 'Е': 'e', 'К': 'k', 'М': 'm', 'Н': 'h', 'О': 'o', 'Р': 'p', 'С': 'c', 'Т': 't', 'Х': 'x',
	'Α': 'a', 'Β': 'b', 'Ε': 'e', 'Ζ': 'z', 'Η': 'h', 'Ι': 'i', 'Κ': 'k', 'Μ': 'm', 'Ν': 'n', 'Ο': 'o', 'Ρ': 'p',
	'Τ': 't', 'Υ': 'y', 'Χ': 'x',
	'а': 'a', 'е': 'e', 'ё': 'e', 'ѕ': 's', 'і': 'i', 'ї': 'i', 'ј': 'j', 'к': 'k', 'м': 'm', 'н': 'h',
	'о': 'o', 'р': 'p', 'с': 'c', 'т': 't', 'у': 'y', 'х': 'x', 'ԁ': 'd', 'ԛ': 'q', 'ԝ': 'w', 'һ': 'h',
	'α': 'a', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x',
	'ɑ': 'a', 'ɡ': 'g', 'ı': 'i', 'ℓ': 'l', 'ſ': 's',
}
