package prompts

import (
	"reflect"
	"testing"
	"testing/fstest"

	"pgregory.net/rapid"
)

// TestSystemForAgentsAlike: whatever the facts and in whatever order
// agents ask, System gives each the prompt assembled afresh for its own
// facts, whether it comes from the prompt kept for agents alike but for
// their id or not.
func TestSystemForAgentsAlike(t *testing.T) {
	for _, lang := range []string{Chinese, English} {
		set, err := Load(lang, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !set.byID {
			t.Fatalf("%s: the default runtime template shows the id as written, but System does not keep prompts", lang)
		}
		rapid.Check(t, func(t *rapid.T) {
			pick := func(label string, choices ...string) string { return rapid.SampledFrom(choices).Draw(t, label) }
			for i := range rapid.IntRange(1, 8).Draw(t, "agents") {
				f := Facts{
					ID:       pick("id", "agent-1", "agent-23", "agent-100", "", " agent-2\n", "a\x00id\x00"),
					Role:     pick("role", "worker", "lead", "x\x00y"),
					TaskID:   pick("task", "t1", "t2"),
					Parent:   pick("parent", "agent-1 (lead)", ""),
					ReportTo: pick("reportTo", "agent-1", "user"),
					MaxSteps: rapid.IntRange(1, 2).Draw(t, "steps"),
					Budget:   pick("budget", "", "model_calls 3"),
					Assigned: rapid.Bool().Draw(t, "assigned"),
				}
				for range rapid.IntRange(0, 2).Draw(t, "contacts") {
					f.Contacts = append(f.Contacts, Contact{ID: pick("contact", "agent-1", "agent-9"), Role: "lead", Source: "parent", Note: pick("note", "", "n\x00")})
				}
				if rapid.Bool().Draw(t, "children") {
					f.Children = []Children{{Role: "w", Reported: pick("reported", "", "agent-4"), Waiting: "agent-5"}}
				}
				isRoot := rapid.Bool().Draw(t, "root")
				rolePrompt := pick("rolePrompt", "work", "work harder", "a\x00id\x00b")
				got, err := set.System(isRoot, rolePrompt, f)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := set.assemble(isRoot, rolePrompt, f)
				if got != want {
					t.Fatalf("agent %d (%+v): System gave\n%s\nwant\n%s", i, f, got, want)
				}
			}
		})
	}
}

// TestSameFactsComparesEveryField: facts that differ in any one field are
// not the same, so that a field added to Facts cannot be left out of the
// comparison that decides whether an agent gets the prompt kept for
// another.
func TestSameFactsComparesEveryField(t *testing.T) {
	typ := reflect.TypeFor[Facts]()
	for i := range typ.NumField() {
		var a, b Facts
		f := reflect.ValueOf(&b).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int:
			f.SetInt(1)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		default:
			t.Fatalf("Facts.%s is a %s: teach this test (and sameFacts) to compare it", typ.Field(i).Name, f.Kind())
		}
		if sameFacts(&a, &b) {
			t.Errorf("facts that differ in %s are the same to sameFacts", typ.Field(i).Name)
		}
	}
}

// TestSystemWithATemplateThatChangesTheID: a host's runtime template that
// uses the id other than to show it as written (quoted, cut, measured,
// compared, kept in a variable) gets every prompt assembled afresh, and one
// that only shows it, even among other fields named ID, keeps prompts.
func TestSystemWithATemplateThatChangesTheID(t *testing.T) {
	for _, c := range []struct {
		tmpl string
		byID bool
	}{
		{`id {{printf "%q" .ID}}`, false},
		{`id {{printf "%.8s" .ID}}`, false},
		{`id length {{len .ID}}`, false},
		{`{{if lt (len .ID) 9}}short{{end}}`, false},
		{`{{if eq .ID "root"}}ROOT{{end}} id {{.ID}}`, false},
		{`{{if eq .TaskID "t2"}}{{slice .ID 6}}{{end}}{{.ID}}`, false},
		{`{{$id := .ID}}{{$id}}`, false},
		{`{{range .Contacts}}{{if eq .ID "root"}}parent{{end}}{{end}}{{.ID}}`, false},
		{`{{define "x"}}{{.}}!{{end}}{{template "x" .ID}}`, false},
		{`{{printf "%#v" .}}`, false},
		{`{{$f := .}}{{$f.ID}}`, false},
		{`{{.ID}} {{range .Contacts}}{{.ID}} {{$.ID}}{{end}}{{if .TaskID}}{{.ID}}{{end}}`, true},
		{`{{with .TaskID}}{{$.ID}}{{end}}`, true}, // the id ends the prompt, and is trimmed with it
	} {
		set, err := Load(English, fstest.MapFS{RuntimeFile: {Data: []byte(c.tmpl)}})
		if err != nil {
			t.Fatal(err)
		}
		if set.byID != c.byID {
			t.Errorf("%s: System keeps prompts for agents alike: %v, want %v", c.tmpl, set.byID, c.byID)
		}
		for _, id := range []string{"root", "agent-1", "agent-100", "agent-1000", "", " agent-9\n"} {
			for _, task := range []string{"t1", "t2"} {
				f := Facts{ID: id, TaskID: task, Contacts: []Contact{{ID: "root"}}}
				got, err := set.System(id == "root", "p", f)
				want, werr := set.assemble(id == "root", "p", f)
				if got != want || (err == nil) != (werr == nil) {
					t.Errorf("%s, %s, %s: System gave %q, %v; want %q, %v", c.tmpl, id, task, got, err, want, werr)
				}
			}
		}
	}
}

// BenchmarkSystem measures the system prompt of a child of a fan-out: its
// siblings' prompt, kept, against one assembled afresh (the baseline).
func BenchmarkSystem(b *testing.B) {
	set, err := Load(English, nil)
	if err != nil {
		b.Fatal(err)
	}
	f := Facts{ID: "agent-7", Role: "worker", Parent: "agent-1 (lead)", ReportTo: "agent-1", TaskID: "fan", MaxSteps: 8, Assigned: true,
		Contacts: []Contact{{ID: "agent-1", Role: "lead", Source: "parent"}}}
	b.Run("sibling", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			set.System(false, "FANOUT-WORKER: do one part", f)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			set.assemble(false, "FANOUT-WORKER: do one part", f)
		}
	})
}

// TestSystemIDWithHalfARune: an id that is not valid UTF-8, whose last
// byte the prompt's trimming would join with what follows it, gets the
// prompt assembled for it, not the one kept for its siblings.
func TestSystemIDWithHalfARune(t *testing.T) {
	set, err := Load(English, fstest.MapFS{RuntimeFile: {Data: []byte(`agent {{.ID}}{{.Role}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"agent-1", "agent-2\xc2", "agent-3"} {
		f := Facts{ID: id, Role: "\x85"}
		got, err := set.System(false, "p", f)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := set.assemble(false, "p", f); got != want {
			t.Errorf("id %q: System gave %q, want %q", id, got, want)
		}
	}
}
