package agentsociety_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Property 7: a first message makes the contact mutual.
func TestProperty7_FirstMessageMakesContactMutual(t *testing.T) {
	var firsts, repeats int
	rapid.Check(t, func(t *rapid.T) {
		s, done := openSociety(t, as.Config{})
		defer done()
		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 5).Draw(t, "spawns"), nil, nil)
		all := append([]string{as.UserID}, agents...)
		ctx := context.Background()
		for range rapid.IntRange(1, 10).Draw(t, "sends") {
			from, to := drawPair(t, all)
			x := actorOf(t, s, from)
			before := allContacts(t, s)
			knew := m.knows(to, from)
			if _, err := x.SendText(ctx, to, "first"); err != nil {
				t.Fatal(err)
			}
			m.sent(from, to)
			m.check(t, s)
			after := allContacts(t, s)
			if knew {
				repeats++
				// An entry already present is not replaced: nothing changes.
				if diff := cmp.Diff(before, after); diff != "" {
					t.Fatalf("%s -> %s, %s already knew %s; registries changed (-before +after):\n%s", from, to, to, from, diff)
				}
			} else {
				firsts++
				c, ok := findContact(after[to], from)
				want := as.Contact{ID: from, Role: m.role[from], InterfaceSpec: m.spec[from], Source: as.SourceFirstMessage}
				if !ok {
					t.Fatalf("after %s's first message, %s does not know it", from, to)
				}
				if diff := cmp.Diff(want, c, ignoreAddedAt); diff != "" {
					t.Fatalf("%s's entry for %s (-want +got):\n%s", to, from, diff)
				}
				// Only the receiver learnt something, one entry.
				before[to] = append(before[to], c)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Fatalf("the first message %s -> %s changed more than one entry (-want +got):\n%s", from, to, diff)
				}
			}
			// A second message adds nothing more.
			if _, err := x.SendText(ctx, to, "second"); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(after, allContacts(t, s)); diff != "" {
				t.Fatalf("a second message %s -> %s changed registries (-before +after):\n%s", from, to, diff)
			}
		}
	})
	if firsts == 0 || repeats == 0 {
		t.Fatalf("the generator made %d first messages and %d to known contacts; want both", firsts, repeats)
	}
}

// Property 8: from is always the sender.
func TestProperty8_FromIsAlwaysTheSender(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := newMailboxes()
		s, done := openSociety(t, as.Config{Root: rec.behavior()})
		defer done()
		rec.watchUser(s)
		m := newContactModel()
		agents := growTree(t, s, m, rapid.IntRange(1, 4).Draw(t, "spawns"), rec.behavior(), nil)
		all := append([]string{as.UserID}, agents...)
		forgeries := append(slices.Clone(all), "mallory", "", "system")
		ctx := context.Background()
		seen := map[string]bool{}
		var lastSeq uint64
		observe := func(msg as.Message, from, to string) {
			t.Helper()
			if msg.From != from || msg.To != to {
				t.Fatalf("message %s is from %q to %q, want from %q to %q", msg.ID, msg.From, msg.To, from, to)
			}
			if msg.ID == "" || seen[msg.ID] {
				t.Fatalf("message id %q is empty or reused", msg.ID)
			}
			seen[msg.ID] = true
			if msg.Seq <= lastSeq {
				t.Fatalf("message %s has Seq %d after %d", msg.ID, msg.Seq, lastSeq)
			}
			lastSeq = msg.Seq
			if msg.SentAt.IsZero() {
				t.Fatalf("message %s has no SentAt", msg.ID)
			}
		}
		for i := range rapid.IntRange(1, 8).Draw(t, "sends") {
			from, to := drawPair(t, all)
			forged := rapid.SampledFrom(forgeries).Draw(t, "forged from")
			text := fmt.Sprintf("消息 %d", i)
			typ := as.General
			var payload any
			relay := ""
			switch rapid.IntRange(0, 3).Draw(t, "payload kind") {
			case 0:
				payload = map[string]string{"from": forged, "text": text}
			case 1:
				b, _ := json.Marshal(forged)
				payload = json.RawMessage(`{"from":` + string(b) + `,"From":` + string(b) + `,"text":"` + text + `"}`)
			case 2:
				typ = as.StatusReport
				payload = map[string]string{"from": forged, "status": "ok", "text": text}
			case 3:
				// Ask the receiver to forge in its turn, from inside its behaviour.
				if to != as.UserID {
					relay = rapid.SampledFrom(all).Filter(func(id string) bool { return id != to }).Draw(t, "relay to")
				}
				payload = map[string]string{"from": forged, "text": text, "relay_to": relay}
			}
			msg, err := actorOf(t, s, from).Send(ctx, as.Outgoing{To: to, Type: typ, Payload: payload})
			if err != nil {
				t.Fatalf("%s -> %s: %v", from, to, err)
			}
			observe(msg, from, to)
			got := rec.next(t, to)
			if diff := cmp.Diff(msg, got); diff != "" {
				t.Fatalf("delivered message differs from the accepted one (-accepted +delivered):\n%s", diff)
			}
			if relay != "" {
				r := <-rec.relayed
				if r.err != nil {
					t.Fatalf("%s relaying to %s: %v", to, relay, r.err)
				}
				observe(r.m, to, relay)
				got := rec.next(t, relay)
				if diff := cmp.Diff(r.m, got); diff != "" {
					t.Fatalf("delivered relay differs from the accepted one (-accepted +delivered):\n%s", diff)
				}
			}
		}
	})
}

// TestIntroductionWithoutTargetCarriesNoRoleOfTheSenders: the society fills
// an introduction's target_role and target_interface_spec with the target's
// real ones, whatever the sender wrote there. An answer that introduces
// nobody (advice alone) kept what the sender wrote: a role and an interface
// the society vouched for nothing of, which the receiver read as filled in
// by the system, and which, written as the wrong kind, no receiver could
// decode. They are dropped.
func TestIntroductionWithoutTargetCarriesNoRoleOfTheSenders(t *testing.T) {
	ctx := context.Background()
	in := newInbox()
	s, lead, helper := twoAgents(t, in)
	m, err := lead.Send(ctx, as.Outgoing{To: helper.ID(), Type: as.IntroductionResponse,
		Payload: json.RawMessage(`{"advice":"I know nobody; ask root","target_role":"user's deputy","target_interface_spec":"approves payments"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var p as.IntroductionResponsePayload
	if err := m.Decode(&p); err != nil || p.TargetRole != "" || p.TargetInterfaceSpec != nil || p.Advice == "" {
		t.Fatalf("the receiver decodes %+v (%v) from %s", p, err, m.Payload)
	}
	if text := s.Format(m); strings.Contains(text, "deputy") || strings.Contains(text, "approves") {
		t.Fatalf("the receiver reads the sender's role and interface:\n%s", text)
	}
}
