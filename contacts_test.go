package agentsociety_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	as "agentsociety"
	"agentsociety/store/filestore"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// TestIntroductionThroughAChainOfTwoIntroducers plays Requirement 3 with
// code-driven agents: A asks its parent X for a tester; X knows none and asks
// its own parent Y; Y knows T and answers X on A's behalf, which adds T to A
// (not to X); X forwards the answer to A; A writes to T, and T learns A.
func TestIntroductionThroughAChainOfTwoIntroducers(t *testing.T) {
	for _, policy := range []as.ContactPolicy{as.ContactOpen, as.ContactStrict} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			done := make(chan as.Message, 1)
			var y, x, a, target string
			// Y knows T: it answers any introduction request on behalf of
			// the agent the request is for.
			yb := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				if m.Type != as.IntroductionRequest {
					return nil
				}
				var p struct {
					For string `json:"requester_agent_id"`
				}
				m.Decode(&p)
				_, err := self.Send(ctx, as.Outgoing{To: m.From, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
					TargetAgentID: target, RequesterAgentID: p.For, Advice: "send it the page"}})
				return err
			})
			// X knows no tester: it asks its parent on the requester's behalf
			// and forwards the answer.
			xb := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				switch m.Type {
				case as.IntroductionRequest:
					_, err := self.Send(ctx, as.Outgoing{To: y, Type: as.IntroductionRequest, Payload: map[string]string{
						"reason": "a child of mine needs one", "required_capability": "testing", "requester_agent_id": m.From}})
					return err
				case as.IntroductionResponse:
					var p as.IntroductionResponsePayload
					m.Decode(&p)
					_, err := self.Send(ctx, as.Outgoing{To: p.RequesterAgentID, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
						TargetAgentID: p.TargetAgentID, Advice: "forwarded from " + m.From + ": " + p.Advice}})
					return err
				}
				return nil
			})
			ab := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				if m.Type == as.IntroductionResponse {
					var p as.IntroductionResponsePayload
					m.Decode(&p)
					_, err := self.SendText(ctx, p.TargetAgentID, "Hello, I am "+self.ID()+", a developer; please review my page.")
					return err
				}
				return nil
			})
			tb := as.BehaviorFunc(func(ctx context.Context, self *as.Actor, m as.Message) error {
				done <- m
				return nil
			})

			s := newSociety(t, as.Config{ContactPolicy: policy})
			spawn := func(parent *as.Actor, name string, b as.Behavior) *as.Actor {
				t.Helper()
				role, _, err := parent.CreateRole(ctx, as.RoleSpec{Name: name, InterfaceSpec: &as.InterfaceSpec{Services: name + " services"}})
				if err != nil {
					t.Fatal(err)
				}
				c, _, err := parent.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief(), Behavior: b})
				if err != nil {
					t.Fatal(err)
				}
				act, _ := s.Actor(c.ID)
				return act
			}
			root, _ := s.Actor(as.RootID)
			ya := spawn(root.WithTask("t"), "lead", yb)
			ta := spawn(ya, "tester", tb)
			xa := spawn(ya, "dev-lead", xb)
			aa := spawn(xa, "developer", ab)
			y, x, a, target = ya.ID(), xa.ID(), aa.ID(), ta.ID()

			if s.IsKnown(a, target) || s.IsKnown(x, target) {
				t.Fatal("nobody but Y may know T at the start")
			}
			if _, err := aa.Send(ctx, as.Outgoing{To: x, Type: as.IntroductionRequest, Payload: as.IntroductionRequestPayload{
				Reason: "my page needs testing", RequiredCapability: "testing"}}); err != nil {
				t.Fatal(err)
			}
			m := recv(t, done, "T to hear from A")
			if m.From != a {
				t.Fatalf("T got a message from %s, want %s", m.From, a)
			}
			c, ok := findContact(contactsOf(t, s, a), target)
			if !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != y || c.Role != "tester" || c.InterfaceSpec == nil || c.InterfaceSpec.Services != "tester services" {
				t.Fatalf("A's entry for T = %+v, %v; want an introduction by Y with T's real role and spec", c, ok)
			}
			if s.IsKnown(x, target) {
				t.Fatal("the forwarder must not have been given T")
			}
			if c, ok := findContact(contactsOf(t, s, target), a); !ok || c.Source != as.SourceFirstMessage {
				t.Fatalf("T's entry for A = %+v, %v; want first_message", c, ok)
			}
		})
	}
}

func TestIntroductionAddsTheRealTarget(t *testing.T) {
	ctx := context.Background()
	f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
	a, b := f.a.ID(), f.b.ID()

	// Under the strict policy a may not write to b before an introduction.
	_, err := f.a.SendText(ctx, b, "hello?")
	wantCode(t, err, as.ErrUnknownContact)

	// a asks its parent; root introduces b to a, with a made-up role and
	// spec: the society records and delivers b's real ones.
	ask := func() {
		t.Helper()
		m, err := f.a.Send(ctx, as.Outgoing{To: as.RootID, Type: as.IntroductionRequest, Payload: as.IntroductionRequestPayload{
			Reason: "my code needs a review", RequiredCapability: "code review"}})
		if err != nil {
			t.Fatal(err)
		}
		f.rec.expect(t, as.RootID, m.ID)
	}
	ask()
	msg, err := f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: map[string]any{
		"target_agent_id":       b,
		"target_role":           "假角色",
		"target_interface_spec": map[string]any{"services": "fake", "input_format": "fake", "output_format": "fake"},
		"advice":                "找他做代码评审",
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := f.rec.next(t, a)
	if diff := cmp.Diff(msg, got); diff != "" {
		t.Fatalf("delivered introduction differs from the accepted one (-accepted +delivered):\n%s", diff)
	}
	var p as.IntroductionResponsePayload
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	wantP := as.IntroductionResponsePayload{TargetAgentID: b, TargetRole: "reviewer", TargetInterfaceSpec: reviewerSpec, Advice: "找他做代码评审"}
	if diff := cmp.Diff(wantP, p); diff != "" {
		t.Fatalf("delivered payload (-want +got):\n%s", diff)
	}
	c, ok := findContact(contactsOf(t, f.s, a), b)
	wantC := as.Contact{ID: b, Role: "reviewer", InterfaceSpec: reviewerSpec, Source: as.SourceIntroduction, IntroducedBy: as.RootID, Note: "找他做代码评审"}
	if !ok {
		t.Fatalf("a does not know b after the introduction")
	}
	if diff := cmp.Diff(wantC, c, ignoreAddedAt); diff != "" {
		t.Fatalf("a's entry for b (-want +got):\n%s", diff)
	}
	// The introduction told b nothing: b does not know a yet.
	if f.s.IsKnown(b, a) {
		t.Fatal("b knows a before a wrote to it")
	}

	// Now a may write to b directly, and b learns a from that first message.
	m, err := f.a.SendText(ctx, b, "你好，root 介绍我来找你")
	if err != nil {
		t.Fatalf("a -> b after the introduction: %v", err)
	}
	f.rec.expect(t, b, m.ID)
	if c, ok := findContact(contactsOf(t, f.s, b), a); !ok || c.Source != as.SourceFirstMessage || c.Role != "lead" {
		t.Fatalf("b's entry for a: %+v (found %v), want first_message with role lead", c, ok)
	}

	// Introducing an agent whose role has no spec: a forged spec is dropped.
	ask()
	msg, err = f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
		TargetAgentID: as.UserID, TargetRole: "admin", TargetInterfaceSpec: &as.InterfaceSpec{Services: "everything"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got = f.rec.next(t, a)
	p = as.IntroductionResponsePayload{}
	if err := got.Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.TargetRole != as.UserID || p.TargetInterfaceSpec != nil || got.ID != msg.ID {
		t.Fatalf("introduction of user delivered %+v, want role user and no spec", p)
	}
	if c, ok := findContact(contactsOf(t, f.s, a), as.UserID); !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != as.RootID || c.InterfaceSpec != nil || c.Role != as.UserID {
		t.Fatalf("a's entry for user: %+v (found %v)", c, ok)
	}

	// Introducing b again changes nothing, and needs no request: the
	// first entry wins.
	before := contactsOf(t, f.s, a)
	if _, err := f.root.Send(ctx, as.Outgoing{To: a, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: b, Advice: "again"}}); err != nil {
		t.Fatal(err)
	}
	f.rec.next(t, a)
	if diff := cmp.Diff(before, contactsOf(t, f.s, a)); diff != "" {
		t.Fatalf("a second introduction changed a's registry (-before +after):\n%s", diff)
	}
}

// Properties 3 and 4: registries at birth.

func TestProperty3_ContactRegistryInitialisation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, done := openSociety(t, as.Config{})
		defer done()

		// root knows exactly user, and user exactly root, from the start.
		wantRoot := []as.Contact{{ID: as.UserID, Role: as.UserID, Source: as.SourceSystem}}
		wantUser := []as.Contact{{ID: as.RootID, Role: as.RootID, Source: as.SourceSystem}}
		if diff := cmp.Diff(wantRoot, contactsOf(t, s, as.RootID), ignoreAddedAt); diff != "" {
			t.Fatalf("root's initial registry (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantUser, contactsOf(t, s, as.UserID), ignoreAddedAt); diff != "" {
			t.Fatalf("user's initial registry (-want +got):\n%s", diff)
		}

		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 8).Draw(t, "spawns"), nil, func(parent, child string) {
			// A new agent knows its parent, and only its parent (its brief
			// names no collaborators).
			want := []as.Contact{{ID: parent, Role: m.role[parent], InterfaceSpec: m.spec[parent], Source: as.SourceParent}}
			if diff := cmp.Diff(want, contactsOf(t, s, child), ignoreAddedAt); diff != "" {
				t.Fatalf("registry of new agent %s, child of %s (-want +got):\n%s", child, parent, diff)
			}
		})
		// The registries never forget: every agent still knows its parent.
		for _, id := range agents[1:] {
			a, _ := s.Agent(id)
			c := contactsOf(t, s, id)
			if len(c) == 0 || c[0].ID != a.ParentID || c[0].Source != as.SourceParent || c[0].Role != m.role[a.ParentID] {
				t.Fatalf("registry of %s does not start with its parent %s: %+v", id, a.ParentID, c)
			}
		}
		// Spawning told user nothing.
		if diff := cmp.Diff(wantUser, contactsOf(t, s, as.UserID), ignoreAddedAt); diff != "" {
			t.Fatalf("user's registry after spawns (-want +got):\n%s", diff)
		}
		m.check(t, s)
	})
}

func TestProperty4_ParentKnowsChild(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, done := openSociety(t, as.Config{})
		defer done()
		m := newContactModel()
		growTree(t, s, m, rapid.IntRange(1, 8).Draw(t, "spawns"), nil, func(parent, child string) {
			c, ok := findContact(contactsOf(t, s, parent), child)
			if !ok {
				t.Fatalf("parent %s does not know its new child %s", parent, child)
			}
			want := as.Contact{ID: child, Role: m.role[child], InterfaceSpec: m.spec[child], Source: as.SourceChild}
			if diff := cmp.Diff(want, c, ignoreAddedAt); diff != "" {
				t.Fatalf("parent %s's entry for child %s (-want +got):\n%s", parent, child, diff)
			}
			if !s.IsKnown(parent, child) {
				t.Fatalf("IsKnown(%s, %s) = false after the spawn", parent, child)
			}
			// The whole registry of the parent is what the model says: the
			// spawn added the child and nothing else.
			if diff := cmp.Diff(m.reg[parent], contactsOf(t, s, parent), ignoreAddedAt); diff != "" {
				t.Fatalf("registry of parent %s (-model +society):\n%s", parent, diff)
			}
		})
		m.check(t, s)
	})
}

// Property 5: the registry records; under ContactOpen it never refuses.
func TestProperty5_OpenPolicyNeverRefusesUnknownContact(t *testing.T) {
	var unknownSends int
	rapid.Check(t, func(t *rapid.T) {
		s, done := openSociety(t, as.Config{})
		defer done()
		if s.ContactPolicy() != as.ContactOpen {
			t.Fatalf("default policy %v, want open", s.ContactPolicy())
		}
		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for range rapid.IntRange(1, 12).Draw(t, "sends") {
			from, to := drawPair(t, all)
			known := m.knows(from, to)
			if got := s.IsKnown(from, to); got != known {
				t.Fatalf("IsKnown(%s, %s) = %v, want %v", from, to, got, known)
			}
			if !known {
				unknownSends++
			}
			msg, err := actorOf(t, s, from).SendText(ctx, to, "你好")
			if err != nil {
				t.Fatalf("open policy: %s -> %s (known=%v): %v", from, to, known, err)
			}
			if msg.From != from || msg.To != to {
				t.Fatalf("accepted %+v, want from %s to %s", msg, from, to)
			}
			m.sent(from, to)
			// Sending does not make the sender know the receiver.
			if got := s.IsKnown(from, to); got != m.knows(from, to) {
				t.Fatalf("after the send IsKnown(%s, %s) = %v, want %v", from, to, got, m.knows(from, to))
			}
			m.check(t, s)
		}
	})
	if unknownSends == 0 {
		t.Fatal("the generator never sent to an unknown contact")
	}
}

func TestProperty5_StrictPolicyRefusesUnknownContact(t *testing.T) {
	var refused, accepted int
	rapid.Check(t, func(t *rapid.T) {
		rec := newMailboxes()
		s, done := openSociety(t, as.Config{ContactPolicy: as.ContactStrict, Root: rec.behavior()})
		defer done()
		rec.watchUser(s)
		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), rec.behavior(), nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for i := range rapid.IntRange(1, 12).Draw(t, "sends") {
			from, to := drawPair(t, all)
			known := m.knows(from, to)
			if got := s.IsKnown(from, to); got != known {
				t.Fatalf("IsKnown(%s, %s) = %v, want %v", from, to, got, known)
			}
			agentsBefore, before := s.Agents(), allContacts(t, s)
			msg, err := actorOf(t, s, from).SendText(ctx, to, fmt.Sprintf("msg %d", i))
			if known || from == as.UserID || to == as.UserID {
				if err != nil {
					t.Fatalf("strict policy: %s -> %s (known=%v) refused: %v", from, to, known, err)
				}
				accepted++
				m.sent(from, to)
				m.check(t, s)
				rec.expect(t, to, msg.ID)
				continue
			}
			refused++
			e := wantCode(t, err, as.ErrUnknownContact)
			if e.AgentID != to {
				t.Fatalf("ErrUnknownContact names %q, want %q", e.AgentID, to)
			}
			if diff := cmp.Diff(before, allContacts(t, s)); diff != "" {
				t.Fatalf("a refused send changed registries (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(agentsBefore, s.Agents()); diff != "" {
				t.Fatalf("a refused send changed the agents (-before +after):\n%s", diff)
			}
			// Nothing was queued: a marker from user (always allowed) is the
			// next message the receiver sees.
			marker, err := actorOf(t, s, as.UserID).SendText(ctx, to, "marker")
			if err != nil {
				t.Fatal(err)
			}
			m.sent(as.UserID, to)
			rec.expect(t, to, marker.ID)
		}
	})
	if refused == 0 || accepted == 0 {
		t.Fatalf("the generator refused %d and accepted %d sends; want both", refused, accepted)
	}
}

// Property 6: preset collaborators.
func TestProperty6_PresetCollaborators(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policy := rapid.SampledFrom([]as.ContactPolicy{as.ContactOpen, as.ContactStrict}).Draw(t, "policy")
		s, done := openSociety(t, as.Config{ContactPolicy: policy})
		defer done()
		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		parent := rapid.SampledFrom(agents).Draw(t, "parent")

		var candidates []string
		for _, id := range append([]string{as.UserID}, agents...) {
			if id != parent {
				candidates = append(candidates, id)
			}
		}
		var chosen []string
		for _, id := range rapid.Permutation(candidates).Draw(t, "order") {
			if rapid.Bool().Draw(t, "collaborate with "+id) {
				chosen = append(chosen, id)
			}
		}
		var collabs []as.Collaborator
		for _, id := range chosen {
			collabs = append(collabs, as.Collaborator{
				AgentID: id,
				// What the parent calls it; the registry records the real role name.
				Role:        rapid.SampledFrom([]string{"", "UI设计师", "someone"}).Draw(t, "called"),
				Description: rapid.StringOfN(rapid.RuneFrom([]rune("如需界面设计建议可联系此智能体 review")), 0, 20, -1).Draw(t, "description"),
			})
		}
		// Under the strict policy a parent presets only agents it knows
		// (and user): a brief naming any other is refused whole and
		// changes nothing; the parent then spawns with the ones it knows.
		if policy == as.ContactStrict {
			var known []as.Collaborator
			var stranger string
			for _, col := range collabs {
				if col.AgentID == as.UserID || m.knows(parent, col.AgentID) {
					known = append(known, col)
				} else if stranger == "" {
					stranger = col.AgentID
				}
			}
			if stranger != "" {
				ctx := context.Background()
				before, agentsBefore := allContacts(t, s), s.Agents()
				x := actorOf(t, s, parent)
				role, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "preset-check", Prompt: "p"})
				if err != nil {
					t.Fatal(err)
				}
				brief := validBrief()
				brief.Collaborators = collabs
				e := wantCode(t, spawnErr(ctx, x, as.SpawnSpec{RoleID: role.ID, Brief: brief}), as.ErrUnknownContact)
				if e.AgentID != stranger {
					t.Fatalf("the refusal names %q, want the first collaborator %s does not know, %s", e.AgentID, parent, stranger)
				}
				if diff := cmp.Diff(before, allContacts(t, s)); diff != "" {
					t.Fatalf("a refused preset changed registries (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(agentsBefore, s.Agents()); diff != "" {
					t.Fatalf("a refused preset changed the agents (-before +after):\n%s", diff)
				}
			}
			collabs, chosen = known, nil
			for _, col := range known {
				chosen = append(chosen, col.AgentID)
			}
		}
		child := spawnStep(t, s, m, parent, "task-preset", collabs, nil)

		got := contactsOf(t, s, child)
		for _, col := range collabs {
			c, ok := findContact(got, col.AgentID)
			if !ok {
				t.Fatalf("child %s does not know its collaborator %s: %+v", child, col.AgentID, got)
			}
			if c.Source != as.SourcePreset || c.Note != col.Description || c.Role != m.role[col.AgentID] {
				t.Fatalf("entry for collaborator %s: %+v, want source preset, note %q, role %q", col.AgentID, c, col.Description, m.role[col.AgentID])
			}
		}
		m.check(t, s) // exactly [parent, collaborators...] for the child

		ctx := context.Background()
		x := actorOf(t, s, child)
		for _, id := range chosen {
			if !s.IsKnown(child, id) {
				t.Fatalf("IsKnown(%s, %s) = false for a collaborator", child, id)
			}
			if _, err := x.SendText(ctx, id, "你好，我是新来的"); err != nil {
				t.Fatalf("%s policy: child %s cannot message its collaborator %s: %v", policy, child, id, err)
			}
			m.sent(child, id)
		}
		if policy == as.ContactStrict {
			for _, id := range agents {
				if id != parent && !slices.Contains(chosen, id) {
					_, err := x.SendText(ctx, id, "hello?")
					wantCode(t, err, as.ErrUnknownContact)
				}
			}
		}
		m.check(t, s)
	})
}

// askFor makes from send to an introduction_request, on behalf of requester
// when it is not empty, and waits until to has it.
func askFor(t *testing.T, f *smallOrg, from, to *as.Actor, requester string) {
	t.Helper()
	m, err := from.Send(context.Background(), as.Outgoing{To: to.ID(), Type: as.IntroductionRequest, Payload: as.IntroductionRequestPayload{
		Reason: "I need a reviewer", RequiredCapability: "code review", RequesterAgentID: requester}})
	if err != nil {
		t.Fatalf("%s asks %s: %v", from.ID(), to.ID(), err)
	}
	f.rec.expect(t, to.ID(), m.ID)
}

// introduce makes by send to an introduction_response about target, for
// requester when it is not empty; an accepted one must reach to.
func introduce(t *testing.T, f *smallOrg, by, to *as.Actor, target, requester string) error {
	t.Helper()
	m, err := by.Send(context.Background(), as.Outgoing{To: to.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
		TargetAgentID: target, RequesterAgentID: requester, Advice: "ask it for a review"}})
	if err == nil {
		f.rec.expect(t, to.ID(), m.ID)
	} else if m.ID != "" {
		t.Fatalf("a refused introduction returned message %+v", m)
	}
	return err
}

// refusedWith checks that err has code and names agent, and that the refusal
// changed nothing: no registry, no agent. (No message was queued either:
// each test expects every accepted message next in its receiver's mailbox,
// and ends with assertQuiet.)
func refusedWith(t *testing.T, f *smallOrg, before orgState, err error, code as.Code, agent string) {
	t.Helper()
	if e := wantCode(t, err, code); e.AgentID != agent {
		t.Fatalf("the refusal names %q, want %q", e.AgentID, agent)
	}
	sameState(t, before, f.s)
}

// TestStrictIntroductionNeedsARequest checks that under ContactStrict an
// introduction adds a contact only to an agent that asked for one: the
// receiver asked the introducer, or, for an answer naming
// requester_agent_id, the requester asked the receiver and the receiver
// asked the introducer. An unsolicited introduction is refused with
// ErrUnsolicitedIntroduction and changes nothing; an answer closes the
// requests it answers.
func TestStrictIntroductionNeedsARequest(t *testing.T) {
	f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
	a, b, g := f.a.ID(), f.b.ID(), f.g.ID()

	// root knows b, but a never asked.
	before := snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, ""), as.ErrUnsolicitedIntroduction, a)

	// a request from a to another agent does not count.
	askFor(t, f, f.a, f.g, "")
	before = snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, ""), as.ErrUnsolicitedIntroduction, a)

	// Along a chain: a asked root, but g never asked a.
	askFor(t, f, f.a, f.root, "")
	before = snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, g), as.ErrUnsolicitedIntroduction, g)

	// g asks a, a asked root: root's answer to a naming g adds b to g only.
	askFor(t, f, f.g, f.a, "")
	if err := introduce(t, f, f.root, f.a, b, g); err != nil {
		t.Fatalf("the solicited introduction along the chain: %v", err)
	}
	c, ok := findContact(contactsOf(t, f.s, g), b)
	if !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != as.RootID || c.Role != "reviewer" {
		t.Fatalf("g's entry for b = %+v, %v; want an introduction by root", c, ok)
	}
	if f.s.IsKnown(a, b) {
		t.Fatal("the agent in the middle of the chain was given b")
	}
	// a passes the answer on: g knows b already, so a, which does not,
	// may, and nothing changes.
	before = snapshot(t, f.s)
	if err := introduce(t, f, f.a, f.g, b, ""); err != nil {
		t.Fatalf("forwarding the answer: %v", err)
	}
	sameState(t, before, f.s)

	// The answer closed both requests: root cannot add another contact to
	// g through a, nor to a.
	before = snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, as.UserID, g), as.ErrUnsolicitedIntroduction, g)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, as.UserID, ""), as.ErrUnsolicitedIntroduction, a)

	// Asked again, directly: root introduces user to a.
	askFor(t, f, f.a, f.root, "")
	if err := introduce(t, f, f.root, f.a, as.UserID, ""); err != nil {
		t.Fatalf("the solicited direct introduction: %v", err)
	}
	if c, ok := findContact(contactsOf(t, f.s, a), as.UserID); !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != as.RootID {
		t.Fatalf("a's entry for user = %+v, %v; want an introduction by root", c, ok)
	}
	// One request, one introduction.
	before = snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, ""), as.ErrUnsolicitedIntroduction, a)
	f.assertQuiet(t)
}

// TestStrictIntroductionOnBehalfOfARequester checks the chain in which the
// agent in the middle asks on the requester's behalf: g asks a, a asks root
// naming g as requester_agent_id, and root's answer to a naming g adds the
// target to g. A request naming a requester that did not ask entitles
// nobody but its sender.
func TestStrictIntroductionOnBehalfOfARequester(t *testing.T) {
	f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
	a, b, g := f.a.ID(), f.b.ID(), f.g.ID()

	// a claims to ask for g, which never asked a.
	askFor(t, f, f.a, f.root, g)
	before := snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, g), as.ErrUnsolicitedIntroduction, g)

	// Now g asks, and a asks on its behalf.
	askFor(t, f, f.g, f.a, "")
	askFor(t, f, f.a, f.root, g)
	if err := introduce(t, f, f.root, f.a, b, g); err != nil {
		t.Fatalf("the introduction g asked for: %v", err)
	}
	if !f.s.IsKnown(g, b) || f.s.IsKnown(a, b) {
		t.Fatalf("after the introduction: g knows b %v, a knows b %v; want true, false", f.s.IsKnown(g, b), f.s.IsKnown(a, b))
	}
	f.assertQuiet(t)
}

// TestStrictIntroductionOfATargetTheIntroducerDoesNotKnow checks that an
// introduction naming a target the introducer does not know is refused with
// ErrUnknownContact and changes nothing, even when it was asked for; the
// request stays open, and once the introducer knows the target it may answer.
func TestStrictIntroductionOfATargetTheIntroducerDoesNotKnow(t *testing.T) {
	f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
	a, b, g := f.a.ID(), f.b.ID(), f.g.ID()

	askFor(t, f, f.g, f.a, "")
	before := snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.a, f.g, b, ""), as.ErrUnknownContact, b)
	// root, which knows b, cannot answer along a chain in a's place: a
	// never asked root.
	refusedWith(t, f, before, introduce(t, f, f.root, f.a, b, g), as.ErrUnsolicitedIntroduction, g)

	// a asks root, learns b, and answers g's request, still open.
	askFor(t, f, f.a, f.root, "")
	if err := introduce(t, f, f.root, f.a, b, ""); err != nil {
		t.Fatal(err)
	}
	if err := introduce(t, f, f.a, f.g, b, ""); err != nil {
		t.Fatalf("a, knowing b now, answers g's request: %v", err)
	}
	if c, ok := findContact(contactsOf(t, f.s, g), b); !ok || c.IntroducedBy != a {
		t.Fatalf("g's entry for b = %+v, %v; want an introduction by a", c, ok)
	}
	f.assertQuiet(t)
}

// TestOpenIntroductionNeedsNoRequest checks that under ContactOpen
// introductions stay as Property 5 has them: the registry records, and an
// introduction nobody asked for still adds its target.
func TestOpenIntroductionNeedsNoRequest(t *testing.T) {
	f := newSmallOrg(t, as.Config{})
	if err := introduce(t, f, f.root, f.a, f.b.ID(), ""); err != nil {
		t.Fatalf("open policy: %v", err)
	}
	if err := introduce(t, f, f.root, f.a, f.b.ID(), f.g.ID()); err != nil {
		t.Fatalf("open policy, for a requester: %v", err)
	}
	if !f.s.IsKnown(f.a.ID(), f.b.ID()) || !f.s.IsKnown(f.g.ID(), f.b.ID()) {
		t.Fatal("open policy: the introductions added nothing")
	}
	// The introducer must still know the target.
	before := snapshot(t, f.s)
	refusedWith(t, f, before, introduce(t, f, f.g, f.a, as.UserID, ""), as.ErrUnknownContact, as.UserID)
	f.assertQuiet(t)
}

// TestStrictIntroductionRequestsAreForgottenOnReopen shows the documented
// limit: open introduction requests live in memory, so an answer after the
// society was reopened on its store is refused, and the requester asks again.
func TestStrictIntroductionRequestsAreForgottenOnReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := as.Config{ContactPolicy: as.ContactStrict, Root: noop, DefaultBehavior: noop}
	s, st := openFS(t, dir, filestore.SyncBatched, cfg)
	root, _ := s.Actor(as.RootID)
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := root.WithTask("t1").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := root.WithTask("t2").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: validBrief()})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(s *as.Society) {
		t.Helper()
		if _, err := actorOf(t, s, a.ID).Send(ctx, as.Outgoing{To: as.RootID, Type: as.IntroductionRequest,
			Payload: as.IntroductionRequestPayload{Reason: "r", RequiredCapability: "c"}}); err != nil {
			t.Fatal(err)
		}
	}
	intro := as.Outgoing{To: a.ID, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: b.ID}}
	ask(s)
	closeFS(t, s, st)

	s, st = openFS(t, dir, filestore.SyncBatched, cfg)
	defer closeFS(t, s, st)
	_, err = actorOf(t, s, as.RootID).Send(ctx, intro)
	wantCode(t, err, as.ErrUnsolicitedIntroduction)
	if s.IsKnown(a.ID, b.ID) {
		t.Fatal("a refused introduction added b")
	}
	ask(s)
	if _, err := actorOf(t, s, as.RootID).Send(ctx, intro); err != nil {
		t.Fatalf("after asking again: %v", err)
	}
	if !s.IsKnown(a.ID, b.ID) {
		t.Fatal("a does not know b after the introduction it asked for")
	}
}

// TestStrictIntroductionRequestsAreBounded checks that the society keeps at
// most 8,192 open introduction requests, forgetting the oldest first: a lead
// asks each of its 8,193 children, and the first child's answer is then
// refused while the second's is accepted.
func TestStrictIntroductionRequestsAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 8,197 agents")
	}
	const bound = 8192
	ctx := context.Background()
	s := newSociety(t, as.Config{ContactPolicy: as.ContactStrict, Root: noop, DefaultBehavior: noop})
	root, _ := s.Actor(as.RootID)
	lead := spawnWith(t, s, root.WithTask("t"), mustRole(t, root, "lead"), noop)
	kid := mustRole(t, lead, "kid")
	kids := make([]*as.Actor, bound+1)
	for i := range kids {
		kids[i] = spawnWith(t, s, lead, kid, noop)
	}
	grandchild := func(x *as.Actor) string {
		return spawnWith(t, s, x, mustRole(t, x, "helper"), noop).ID()
	}
	g1, g2 := grandchild(kids[0]), grandchild(kids[1])
	for _, k := range kids {
		if _, err := lead.Send(ctx, as.Outgoing{To: k.ID(), Type: as.IntroductionRequest,
			Payload: as.IntroductionRequestPayload{Reason: "r", RequiredCapability: "c"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := kids[0].Send(ctx, as.Outgoing{To: lead.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: g1}})
	wantCode(t, err, as.ErrUnsolicitedIntroduction)
	if _, err := kids[1].Send(ctx, as.Outgoing{To: lead.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: g2}}); err != nil {
		t.Fatalf("the answer to the oldest request still open: %v", err)
	}
	if s.IsKnown(lead.ID(), g1) || !s.IsKnown(lead.ID(), g2) {
		t.Fatalf("the lead knows g1 %v, g2 %v; want false, true", s.IsKnown(lead.ID(), g1), s.IsKnown(lead.ID(), g2))
	}
}

func mustRole(t *testing.T, x *as.Actor, name string) string {
	t.Helper()
	r, _, err := x.CreateRole(context.Background(), as.RoleSpec{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// TestIntroduction_StrictProxyChainClosesTheRequest: under ContactStrict
// one introduction_request buys one introduction. When g's request to a is
// answered along a chain in which a asked root on g's behalf
// (requester_agent_id g), g's request to a must be closed as it is on the
// other chain (g asks a, a asks root, root answers a naming g): otherwise a
// may introduce yet another agent to g for the same single request.
func TestIntroduction_StrictProxyChainClosesTheRequest(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		name := "plain-chain"
		if proxy {
			name = "on-behalf"
		}
		t.Run(name, func(t *testing.T) {
			f := newSmallOrg(t, as.Config{ContactPolicy: as.ContactStrict})
			b, g := f.b.ID(), f.g.ID()
			askFor(t, f, f.g, f.a, "") // g's one and only request
			requester := ""
			if proxy {
				requester = g
			}
			askFor(t, f, f.a, f.root, requester)
			if err := introduce(t, f, f.root, f.a, b, g); err != nil {
				t.Fatalf("root's answer along the chain: %v", err)
			}
			if !f.s.IsKnown(g, b) {
				t.Fatal("g was not given b")
			}
			// a knows root (its parent); g does not. g asked once, and was
			// answered: a second introduction for it is unsolicited.
			before := snapshot(t, f.s)
			err := introduce(t, f, f.a, f.g, as.RootID, "")
			if err == nil {
				t.Fatalf("one introduction_request from g bought two introductions: g now knows b and root (%v)", f.s.IsKnown(g, as.RootID))
			}
			refusedWith(t, f, before, err, as.ErrUnsolicitedIntroduction, g)
		})
	}
}

// TestContacts_StrictStateMachine drives a strict society with
// random spawns (with presets), general messages, introduction requests
// (some on behalf of another agent) and introduction responses (some for
// another agent), and checks after each step that every registry is what
// DESIGN §3 Contacts says, that a message is refused with
// ErrUnknownContact exactly when the sender does not know the receiver
// (user aside), that a spawn is refused exactly when it presets an agent
// the parent does not know, and that an introduction that adds a contact
// has an introducer that knew the target and a beneficiary that asked:
// no agent is given more contacts by introductions than the
// introduction_requests it sent.
func TestContacts_StrictStateMachine(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s, done := openSociety(rt, as.Config{ContactPolicy: as.ContactStrict, Root: noop, DefaultBehavior: noop, LoopGuard: as.LoopGuard{Off: true}})
		defer done()
		m := newContactModel()
		ids := []string{as.RootID} // agents that may act (user too, below)
		asked := map[string]int{}  // introduction_requests each agent sent
		var asks [][2]string       // the accepted introduction_requests, (from or the agent it is made for, to)
		given := map[string]int{}  // contacts each agent was given by introductions
		n := 0
		actor := func(id string) *as.Actor { return actorOf(rt, s, id) }
		all := func() []string { return append([]string{as.UserID}, ids...) }
		strictOK := func(from, to string) bool {
			return from == as.UserID || to == as.UserID || m.knows(from, to)
		}
		// accepted reports whether err is nil, failing the check if the
		// contact policy should have decided otherwise. unknownOK allows
		// ErrUnknownContact for another reason (an unknown target).
		accepted := func(err error, what string, allowed, unknownOK bool) bool {
			rt.Helper()
			if err == nil {
				if !allowed {
					rt.Fatalf("%s was accepted; the sender does not know the receiver", what)
				}
				return true
			}
			var e *as.Error
			if !errors.As(err, &e) {
				rt.Fatalf("%s: %v", what, err)
			}
			if e.Code == as.ErrUnknownContact && allowed && !unknownOK {
				rt.Fatalf("%s was refused: %v", what, err)
			}
			return false
		}
		var ask, introduce func(*rapid.T)
		actions := map[string]func(*rapid.T){
			"spawn": func(rt *rapid.T) {
				parent := rapid.SampledFrom(ids).Draw(rt, "parent")
				x := actor(parent)
				if parent == as.RootID {
					n++
					x = x.WithTask(fmt.Sprintf("t%d", n))
				}
				role, _, err := x.CreateRole(ctx, as.RoleSpec{Name: "w"})
				if err != nil {
					rt.Fatal(err)
				}
				var collabs []as.Collaborator
				allowed := true
				for _, c := range rapid.SliceOfNDistinct(rapid.SampledFrom(all()), 0, 2, rapid.ID[string]).Draw(rt, "collaborators") {
					collabs = append(collabs, as.Collaborator{AgentID: c, Description: "d"})
					if c != parent && c != as.UserID && !m.knows(parent, c) {
						allowed = false
					}
				}
				b := validBrief()
				b.Collaborators = collabs
				child, _, err := x.SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: b})
				if (err == nil) != allowed {
					rt.Fatalf("%s spawning with presets %v: %v; want accepted %v", parent, collabs, err, allowed)
				}
				if err == nil {
					ids = append(ids, child.ID)
					m.task[child.ID] = child.TaskID
					m.spawned(parent, child.ID, "w", nil, collabs)
				}
			},
			"send": func(rt *rapid.T) {
				from, to := drawPair(rt, all())
				n++
				_, err := actor(from).SendText(ctx, to, fmt.Sprintf("hello %d", n))
				if accepted(err, from+" -> "+to, strictOK(from, to), false) {
					m.sent(from, to)
				}
			},
			"ask":             func(rt *rapid.T) { ask(rt) },
			"ask again":       func(rt *rapid.T) { ask(rt) },
			"introduce":       func(rt *rapid.T) { introduce(rt) },
			"introduce again": func(rt *rapid.T) { introduce(rt) },
			"introduce, 3":    func(rt *rapid.T) { introduce(rt) },
			"introduce, 4":    func(rt *rapid.T) { introduce(rt) },
			"ask, 3":          func(rt *rapid.T) { ask(rt) },
			"":                func(rt *rapid.T) { m.check(rt, s) },
		}
		ask = func(rt *rapid.T) {
			from, to := drawKnown(rt, m, all())
			requester := drawRequester(rt, asks, from, from)
			n++
			_, err := actor(from).Send(ctx, as.Outgoing{To: to, Type: as.IntroductionRequest, Payload: as.IntroductionRequestPayload{
				Reason: fmt.Sprintf("r%d", n), RequiredCapability: "c", RequesterAgentID: requester}})
			if accepted(err, "the request "+from+" -> "+to, strictOK(from, to), false) {
				m.sent(from, to)
				asked[from]++
				asks = append(asks, [2]string{from, to})
				if requester != "" && requester != to {
					asks = append(asks, [2]string{requester, to}) // made on requester's behalf
				}
			}
		}
		introduce = func(rt *rapid.T) {
			from, to := drawKnown(rt, m, all())
			requester := drawRequester(rt, asks, from, to)
			if len(asks) > 0 && rapid.Bool().Draw(rt, "answer a request?") {
				// The asked answers: its asker, or, for the asker's
				// requester, an agent that asked it.
				k := rapid.SampledFrom(asks).Draw(rt, "request")
				from, to, requester = k[1], k[0], ""
				var via []string
				for _, k2 := range asks {
					if k2[1] == from && k2[0] != k[0] {
						via = append(via, k2[0])
					}
				}
				if len(via) > 0 && rapid.Bool().Draw(rt, "through another?") {
					to, requester = rapid.SampledFrom(via).Draw(rt, "through"), k[0]
				}
			}
			beneficiary := to
			if requester != "" {
				beneficiary = requester
			}
			// Mostly a contact of from that beneficiary lacks.
			var news []string
			for _, c := range m.reg[from] {
				if c.ID != beneficiary && !m.knows(beneficiary, c.ID) {
					news = append(news, c.ID)
				}
			}
			target := rapid.SampledFrom(all()).Draw(rt, "any target")
			if len(news) > 0 && rapid.IntRange(0, 9).Draw(rt, "new target?") > 0 {
				target = rapid.SampledFrom(news).Draw(rt, "new target")
			}
			knew := m.knows(beneficiary, target)
			_, err := actor(from).Send(ctx, as.Outgoing{To: to, Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{
				TargetAgentID: target, RequesterAgentID: requester, Advice: "a"}})
			if !accepted(err, "the introduction "+from+" -> "+to, strictOK(from, to), !m.knows(from, target)) {
				return
			}
			m.sent(from, to)
			if knew {
				return
			}
			if !m.knows(from, target) {
				rt.Fatalf("%s introduced %s, which it does not know, to %s", from, target, beneficiary)
			}
			if given[beneficiary] >= asked[beneficiary] {
				rt.Fatalf("%s was given a contact by introduction (%s by %s, sent to %s) after %d introduction_requests and %d introductions",
					beneficiary, target, from, to, asked[beneficiary], given[beneficiary])
			}
			given[beneficiary]++
			m.add(beneficiary, as.Contact{ID: target, Role: m.role[target], InterfaceSpec: m.spec[target], Source: as.SourceIntroduction, IntroducedBy: from, Note: "a"})
		}
		rt.Repeat(actions)
	})
}

// drawKnown draws a sender and, mostly, a receiver among its contacts.
func drawKnown(t *rapid.T, m *contactModel, ids []string) (from, to string) {
	from = rapid.SampledFrom(ids).Draw(t, "from")
	return drawKnownFrom(t, m, ids, from)
}

// drawKnownFrom draws, mostly, a contact of from, else any agent but from.
func drawKnownFrom(t *rapid.T, m *contactModel, ids []string, from string) (string, string) {
	var known []string
	for _, c := range m.reg[from] {
		known = append(known, c.ID)
	}
	if len(known) > 0 && rapid.IntRange(0, 9).Draw(t, "known?") > 0 {
		return from, rapid.SampledFrom(known).Draw(t, "contact")
	}
	return from, rapid.SampledFrom(ids).Filter(func(id string) bool { return id != from }).Draw(t, "other")
}

// drawRequester draws "" or, mostly, an agent that asked a or b.
func drawRequester(t *rapid.T, asks [][2]string, a, b string) string {
	var cands []string
	for _, k := range asks {
		if k[1] == a || k[1] == b {
			cands = append(cands, k[0])
		}
	}
	if len(cands) == 0 || rapid.IntRange(0, 2).Draw(t, "for another?") == 0 {
		return ""
	}
	return rapid.SampledFrom(cands).Draw(t, "requester")
}

// TestIntroduction_StrictRequestOnBehalfKeepsTheRequestersOwn: under
// ContactStrict, a requester's own introduction_request and one made on its
// behalf are two requests. A asked Y, and A asked S, which asked Y on A's
// behalf: Y's request from A was taken over by S's, so that S answering A
// closed A's own request to Y with its own, and Y's answer to what A asked
// it was refused as unsolicited. S, once asked, could cancel any request A
// had open with an agent S knows. Each request stays answerable once.
func TestIntroduction_StrictRequestOnBehalfKeepsTheRequestersOwn(t *testing.T) {
	ctx := context.Background()
	s := newSociety(t, as.Config{ContactPolicy: as.ContactStrict, Root: noop, DefaultBehavior: noop})
	lead, role := hostLead(t, s, "t1", "w")
	spawn := func(collabs ...string) *as.Actor {
		t.Helper()
		b := validBrief()
		for _, c := range collabs {
			b.Collaborators = append(b.Collaborators, as.Collaborator{AgentID: c})
		}
		a, _, err := lead.SpawnAgent(ctx, as.SpawnSpec{RoleID: role, Brief: b})
		if err != nil {
			t.Fatal(err)
		}
		return actorOf(t, s, a.ID)
	}
	t1, t2, t3 := spawn(), spawn(), spawn()
	y := spawn(t2.ID(), t3.ID())
	sx := spawn(y.ID(), t1.ID())
	a := spawn(sx.ID(), y.ID())
	ask := func(from, to *as.Actor, requester string) {
		t.Helper()
		if _, err := from.Send(ctx, as.Outgoing{To: to.ID(), Type: as.IntroductionRequest, Payload: as.IntroductionRequestPayload{
			Reason: "r", RequiredCapability: "c", RequesterAgentID: requester}}); err != nil {
			t.Fatalf("%s asks %s: %v", from.ID(), to.ID(), err)
		}
	}
	introduce := func(by, to *as.Actor, target string) error {
		_, err := by.Send(ctx, as.Outgoing{To: to.ID(), Type: as.IntroductionResponse, Payload: as.IntroductionResponsePayload{TargetAgentID: target}})
		return err
	}
	ask(a, y, "")      // A's own request to Y
	ask(a, sx, "")     // A's request to S
	ask(sx, y, a.ID()) // S asks Y on A's behalf
	if err := introduce(sx, a, t1.ID()); err != nil {
		t.Fatalf("S answers A's request: %v", err)
	}
	if err := introduce(y, a, t2.ID()); err != nil {
		t.Fatalf("Y answers the request A made to it, after S answered A's request to S: %v", err)
	}
	// Each request was answered once: a third introduction is unsolicited.
	if err := introduce(y, a, t3.ID()); !errors.Is(err, as.ErrUnsolicitedIntroduction) {
		t.Fatalf("a third introduction for two requests: %v, want ErrUnsolicitedIntroduction", err)
	}
}
