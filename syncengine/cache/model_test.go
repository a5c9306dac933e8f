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
