package modal

import (
	"errors"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/boxfs/boxfs/providers"
)

// DefaultServerURL is Modal's control plane.
const DefaultServerURL = "https://api.modal.com:443"

// profile is what a client is opened with: credentials, the server and the
// environment. Values come from the provider's options, else the host's
// MODAL_* variables, else the chosen profile of ~/.modal.toml, as Modal's
// own clients read them.
type profile struct {
	tokenID, tokenSecret string
	serverURL            string
	environment          string
	imageBuilderVersion  string
	// maxThrottleWait bounds the time a throttled call takes, waits
	// included (MODAL_MAX_THROTTLE_WAIT, whole seconds, as Modal's Go
	// client reads it; default throttleBudget). 0: a throttled call is not
	// waited for.
	maxThrottleWait time.Duration
}

// tomlProfile is one [profile] table of ~/.modal.toml.
type tomlProfile struct {
	TokenID             string `toml:"token_id"`
	TokenSecret         string `toml:"token_secret"`
	ServerURL           string `toml:"server_url"`
	Environment         string `toml:"environment"`
	ImageBuilderVersion string `toml:"image_builder_version"`
	Active              bool   `toml:"active"`
}

// resolveProfile reads the options, the environment and the config file
// (MODAL_CONFIG_PATH, else ~/.modal.toml; a missing file is no error). The
// profile is the "profile" option, else MODAL_PROFILE, else the one marked
// active.
func resolveProfile(op string, opts map[string]string) (profile, error) {
	file, err := readConfigFile()
	if err != nil {
		return profile{}, providers.E(providers.Invalid, op, err)
	}
	name := first(opts["profile"], os.Getenv("MODAL_PROFILE"))
	if name == "" {
		for n, p := range file {
			if p.Active {
				name = n
				break
			}
		}
	}
	fp, ok := file[name]
	if name != "" && !ok && first(opts["profile"], os.Getenv("MODAL_PROFILE")) != "" {
		return profile{}, providers.Errorf(providers.Invalid, op, "no profile %q in the Modal config file", name)
	}
	p := profile{
		tokenID:             first(opts["token_id"], os.Getenv("MODAL_TOKEN_ID"), fp.TokenID),
		tokenSecret:         first(opts["token_secret"], os.Getenv("MODAL_TOKEN_SECRET"), fp.TokenSecret),
		serverURL:           first(opts["server_url"], os.Getenv("MODAL_SERVER_URL"), fp.ServerURL, DefaultServerURL),
		environment:         first(opts["environment"], os.Getenv("MODAL_ENVIRONMENT"), fp.Environment),
		imageBuilderVersion: first(os.Getenv("MODAL_IMAGE_BUILDER_VERSION"), fp.ImageBuilderVersion),
		maxThrottleWait:     throttleBudget,
	}
	if v := os.Getenv("MODAL_MAX_THROTTLE_WAIT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return profile{}, providers.Errorf(providers.Invalid, op, "MODAL_MAX_THROTTLE_WAIT=%q: want a whole number of seconds, 0 or more", v)
		}
		p.maxThrottleWait = time.Duration(n) * time.Second
	}
	if p.tokenID == "" || p.tokenSecret == "" {
		return profile{}, providers.Errorf(providers.Auth, op, "no Modal token: set the token_id and token_secret options, MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or a profile in ~/.modal.toml")
	}
	return p, nil
}

func readConfigFile() (map[string]tomlProfile, error) {
	path := os.Getenv("MODAL_CONFIG_PATH")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil
		}
		path = filepath.Join(home, ".modal.toml")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var file map[string]tomlProfile
	if _, err := toml.Decode(string(b), &file); err != nil {
		return nil, err
	}
	return file, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// serverTarget turns a server URL into a gRPC dial target and whether the
// connection is plaintext: https (the default port 443) always, http only
// to a loopback address, where a token can reach nobody else.
func serverTarget(op, raw string) (target string, plaintext bool, err error) {
	u, perr := url.Parse(raw)
	if perr != nil || u.Hostname() == "" {
		return "", false, providers.Errorf(providers.Invalid, op, "server URL %q is not a URL", raw)
	}
	port := u.Port()
	switch u.Scheme {
	case "https":
		if port == "" {
			port = "443"
		}
	case "http":
		if !isLoopback(u.Hostname()) {
			return "", false, providers.Errorf(providers.Invalid, op, "server URL %q: plaintext is allowed only to a loopback address; use https", raw)
		}
		if port == "" {
			port = "80"
		}
		plaintext = true
	default:
		return "", false, providers.Errorf(providers.Invalid, op, "server URL %q: want https (or http to loopback)", raw)
	}
	return net.JoinHostPort(u.Hostname(), port), plaintext, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
