package e2b

import (
	"encoding/json"
	"regexp"
	"strings"
)

// redacted stands in for what scrub takes out.
const redacted = "<redacted>"

var (
	// keyRE is what E2B's API keys and access tokens look like.
	keyRE = regexp.MustCompile(`\b(?:sk_)?e2b_[A-Za-z0-9_]{8,}`)
	// namedRE is the value after a credential's name, in a header, a query,
	// JSON or a shell word (X-API-Key: v, "accessToken":"v", token=v,
	// Authorization: Bearer v), the name quoted or not.
	namedRE = regexp.MustCompile(`(?i)((?:x-)?(?:api[-_]?key|(?:envd)?[-_]?access[-_]?token|auth(?:orization)?|token|secret|password)["']?\s*[:=]\s*)((?:bearer|basic)\s+)?("(?:\\.|[^"\\])*"|'[^']*'|[^\s,;&}'"]+)`)
	// envVarsRE is a request's environment echoed back as JSON.
	envVarsRE = regexp.MustCompile(`(?i)(["']?env_?vars["']?\s*:\s*)\{[^}]*\}?`)
)

// scrub returns text, from an answer of E2B, with what may be a credential
// replaced by <redacted>: each of secrets (the API key, a sandbox's access
// token, the values of the environment a request carried) wherever it
// appears, anything shaped like an E2B key or token, the value after a
// credential's name, and an echoed envVars object. A failed answer's body
// goes into errors, which reach the box's err file and the log.
func scrub(text string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= minSecret {
			text = strings.ReplaceAll(text, s, redacted)
		}
	}
	text = envVarsRE.ReplaceAllString(text, "${1}{"+redacted+"}")
	text = namedRE.ReplaceAllString(text, "${1}${2}"+redacted)
	return keyRE.ReplaceAllString(text, redacted)
}

// minSecret is the shortest value scrub replaces wherever it appears: a
// shorter one (an env value "1") would take out ordinary text.
const minSecret = 6

// payloadSecrets returns the values of the environment a request's JSON
// body carries (a create's envVars), for scrub.
func payloadSecrets(payload []byte) []string {
	if len(payload) == 0 {
		return nil
	}
	var body struct {
		EnvVars map[string]string `json:"envVars"`
	}
	if json.Unmarshal(payload, &body) != nil {
		return nil
	}
	var out []string
	for _, v := range body.EnvVars {
		out = append(out, v)
	}
	return out
}

// scrubbed is an error whose text was scrubbed: envd's answers (a Connect
// error's message) come from the sandbox and reach the err file and the
// log. It unwraps to the error as it came, for its code.
type scrubbed struct {
	err  error
	text string
}

// scrubbed returns err with its text scrubbed of the box's secrets.
func (b *Box) scrubbed(err error) error {
	if err == nil {
		return nil
	}
	return scrubbed{err, scrub(err.Error(), b.secrets()...)}
}

func (s scrubbed) Error() string { return s.text }
func (s scrubbed) Unwrap() error { return s.err }
