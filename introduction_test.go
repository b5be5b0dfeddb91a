package agentsociety_test

import (
	"context"
	"testing"
	"time"

	as "agentsociety"
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
			var m as.Message
			select {
			case m = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("T never heard from A")
			}
			if m.From != a {
				t.Fatalf("T got a message from %s, want %s", m.From, a)
			}
			c, ok := contactOf(s, a, target)
			if !ok || c.Source != as.SourceIntroduction || c.IntroducedBy != y || c.Role != "tester" || c.InterfaceSpec == nil || c.InterfaceSpec.Services != "tester services" {
				t.Fatalf("A's entry for T = %+v, %v; want an introduction by Y with T's real role and spec", c, ok)
			}
			if s.IsKnown(x, target) {
				t.Fatal("the forwarder must not have been given T")
			}
			if c, ok := contactOf(s, target, a); !ok || c.Source != as.SourceFirstMessage {
				t.Fatalf("T's entry for A = %+v, %v; want first_message", c, ok)
			}
		})
	}
}
