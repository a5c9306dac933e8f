package archil_test

import (
	"encoding/json"
	"net/http"
	"os"
)

// readDir lists a directory's names; a missing one has none.
func readDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	if os.IsNotExist(err) {
		err = nil
	}
	return out, err
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
