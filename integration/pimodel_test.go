package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// modelCall is one tool call a scripted model answers with.
type modelCall struct {
	tool string
	args map[string]any
}

// scriptedModel is an OpenAI-compatible chat completions server on
// 127.0.0.1 that plays a model: its answer to a request is the script's
// step for the number of assistant turns the request holds, streamed as
// server-sent events, one tool call per turn; past the script it answers
// with text and ends the agent's run.
type scriptedModel struct {
	srv *httptest.Server
	// script[i] is turn i's call, made from what the tools of the turns
	// before it returned (results[j] for turn j).
	script []func(results []string) modelCall

	mu      sync.Mutex
	results map[int]string // turn -> what its tool returned, as the agent sent it
	errs    []string       // requests the server could not answer
	served  chan int       // each turn answered, in order
}

func newScriptedModel(t *testing.T, script []func(results []string) modelCall) *scriptedModel {
	t.Helper()
	s := &scriptedModel{script: script, results: map[int]string{}, served: make(chan int, len(script)+8)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// baseURL is what the agent's provider settings name.
func (s *scriptedModel) baseURL() string { return s.srv.URL + "/v1" }

// result is what turn's tool returned, once the next request carried it.
func (s *scriptedModel) result(turn int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[turn]
	return r, ok
}

func (s *scriptedModel) failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// chatMessage is the part of a request's message the model reads.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text is a message's content: a string, or the text of its parts.
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	json.Unmarshal(m.Content, &parts)
	for _, p := range parts {
		s += p.Text
	}
	return s
}

func (s *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(format string, a ...any) {
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Sprintf(format, a...))
		s.mu.Unlock()
		http.Error(w, fmt.Sprintf(format, a...), http.StatusBadRequest)
	}
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		fail("%s %s: not served", r.Method, r.URL.Path)
		return
	}
	var req struct {
		Stream   bool          `json:"stream"`
		Messages []chatMessage `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail("request: %v", err)
		return
	}
	if !req.Stream {
		fail("a request without stream: true")
		return
	}
	// The turn is the number of assistant messages so far; the tool
	// message after assistant turn i is what turn i's call returned.
	turn := 0
	var results []string
	s.mu.Lock()
	for _, m := range req.Messages {
		switch m.Role {
		case "assistant":
			turn++
		case "tool":
			results = append(results, m.text())
			s.results[turn-1] = m.text()
		}
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	bw := bufio.NewWriter(w)
	event := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(bw, "data: %s\n\n", b)
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": fmt.Sprintf("chatcmpl-%d", turn), "object": "chat.completion.chunk", "created": 1, "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	if turn < len(s.script) {
		c := s.script[turn](results)
		args, _ := json.Marshal(c.args)
		event(chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"index": 0, "id": fmt.Sprintf("call_%d", turn), "type": "function",
			"function": map[string]any{"name": c.tool, "arguments": string(args)},
		}}}, nil))
		event(chunk(map[string]any{}, "tool_calls"))
	} else {
		event(chunk(map[string]any{"role": "assistant", "content": "done"}, nil))
		event(chunk(map[string]any{}, "stop"))
	}
	event(map[string]any{"id": fmt.Sprintf("chatcmpl-%d", turn), "object": "chat.completion.chunk", "created": 1, "model": "scripted",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
	fmt.Fprint(bw, "data: [DONE]\n\n")
	bw.Flush()
	select {
	case s.served <- turn:
	default:
	}
}
