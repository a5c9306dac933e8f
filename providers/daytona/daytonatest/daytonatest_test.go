package daytonatest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/boxfs/boxfs/providers/daytona/daytonatest"
)

// TestParseCommand pins the daemon's split: spaces separate, ' and " group
// (the other quote is kept), no escapes, empty words vanish, bytes that are
// not UTF-8 become U+FFFD.
func TestParseCommand(t *testing.T) {
	for in, want := range map[string][]string{
		`a b`:             {"a", "b"},
		`a   b `:          {"a", "b"},
		`'b c' "d e"`:     {"b c", "d e"},
		`'it"s'`:          {`it"s`},
		`"it's"`:          {"it's"},
		`a\ b`:            {`a\`, "b"},
		`x'y z'w`:         {"xy zw"},
		`'' ""`:           nil,
		"tab\there":       {"tab\there"},
		"\xff":            {"\ufffd"},
		`sh -c 'echo $0'`: {"sh", "-c", "echo $0"},
	} {
		if got := daytonatest.ParseCommand(in); !slices.Equal(got, want) {
			t.Errorf("ParseCommand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAuthAndRecord: a request without the key is 401 and recorded; the
// key is found where it is.
func TestAuthAndRecord(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{})
	defer srv.Close()
	resp, err := http.Get(srv.APIURL() + "/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.APIURL()+"/sandbox?x="+srv.APIKey(), bytes.NewReader([]byte(`{"name":"`+srv.APIKey()+`"}`)))
	req.Header.Set("Authorization", "Bearer "+srv.APIKey())
	req.Header.Set("X-Other", srv.APIKey())
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(srv.Leaks(srv.APIKey())); n != 3 {
		t.Errorf("Leaks found %d places, want 3 (query, header, body): %v", n, srv.Leaks(srv.APIKey()))
	}
	if got := srv.Requests(); len(got) != 2 || got[0].Status != 401 || got[1].Status != 200 {
		t.Errorf("recorded %+v", got)
	}
}

// TestCreatingPolls: a new sandbox is creating for the configured number of
// reads, then started.
func TestCreatingPolls(t *testing.T) {
	srv := daytonatest.New(daytonatest.Options{CreatingPolls: 2})
	defer srv.Close()
	call := func(method, path string, body string) map[string]any {
		req, _ := http.NewRequest(method, srv.APIURL()+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+srv.APIKey())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	sb := call(http.MethodPost, "/sandbox", `{"name":"n"}`)
	id, _ := sb["id"].(string)
	var states []any
	states = append(states, sb["state"])
	for range 3 {
		states = append(states, call(http.MethodGet, "/sandbox/"+id, "")["state"])
	}
	if want := []any{"creating", "creating", "creating", "started"}; !slices.Equal(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	if dup := call(http.MethodPost, "/sandbox", `{"name":"n"}`); dup["statusCode"] != float64(409) {
		t.Errorf("a second sandbox named n: %v, want 409", dup)
	}
	call(http.MethodDelete, "/sandbox/"+id, "")
	if got := call(http.MethodGet, "/sandbox/"+id, ""); got["statusCode"] != float64(404) {
		t.Errorf("read after delete: %v, want 404", got)
	}
}
