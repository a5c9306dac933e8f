package cache

import (
	"fmt"
	"testing"
)

// Fetches and host changes that overlap without pause (never none in
// flight) keep the model's marks bounded: the marks older than every
// fetch in flight are dropped, and those a fetch in flight needs are
// kept.
func TestModelMarksStayBounded(t *testing.T) {
	m := newModel()
	long := m.begin() // in flight for the first half
	m.hostChanged("early")
	prev := m.begin()
	for i := range 100_000 {
		if i == 50_000 {
			if v := m.judge("early", long); v != hostWins {
				t.Fatalf("the long fetch, begun before the host changed early: %v, want hostWins", v)
			}
			m.end(long)
		}
		next := m.begin()
		rels := []string{fmt.Sprintf("d%d/f%d", i%100, i)}
		h := m.hostBegin(rels)
		m.hostChanged(rels[0])
		m.hostEnd(rels, h)
		m.end(prev)
		prev = next
		if i > 50_000 && m.marks > 3*pruneMin {
			t.Fatalf("after %d overlapping changes %d marks are kept", i, m.marks)
		}
	}
	if m.inflight != 1 {
		t.Fatalf("%d in flight, want 1", m.inflight)
	}
	m.hostChanged("late")
	if v := m.judge("late", prev); v != hostWins {
		t.Errorf("a fetch begun before the host changed late: %v, want hostWins", v)
	}
}

// A push begun after a fetch and recorded before its answer wins over the
// answer for its path, also when the watch reported the path since (the
// push's echo); a push or another host change out when the fetch began
// makes the answer stale instead (its write may have landed first, and a
// box change after it). Any host change begun after the fetch wins over
// its answer, also when the watch reported the path after the change:
// the answer is older than the change (F-noundo).
func TestModelPushWinsOverFetch(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		pushFirst, report, push bool
		want                    verdict
	}{
		{"push out before the fetch", true, false, true, reported},
		{"push out before the fetch, echo", true, true, true, reported},
		{"push begun after the fetch", false, false, true, hostWins},
		{"push begun after the fetch, echo", false, true, true, hostWins},
		{"change out before the fetch", true, false, false, reported},
		{"change begun after the fetch", false, false, false, hostWins},
		{"change begun after the fetch, report", false, true, false, hostWins},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel()
			rels := []string{"d/f"}
			var h, fetch ticket
			if tc.pushFirst {
				h = m.hostBegin(rels)
				fetch = m.begin()
			} else {
				fetch = m.begin()
				h = m.hostBegin(rels)
			}
			m.hostChanged("d/f")
			if tc.push {
				m.pushEnded("d/f")
			}
			m.hostEnd(rels, h)
			if tc.report {
				m.boxReported("d/f")
			}
			if v := m.judge("d/f", fetch); v != tc.want {
				t.Errorf("judge: %v, want %v", v, tc.want)
			}
			got := map[string]verdict{}
			m.changedIn("d", fetch, func(name string, v verdict) { got[name] = v })
			if got["f"] != tc.want {
				t.Errorf("changedIn: %v, want %v", got, tc.want)
			}
		})
	}
}
