package valkey

import (
	"fmt"
	"strings"

	vk "github.com/valkey-io/valkey-go"
)

// applySecurity sets cfg's credentials on opt, over what the URL
// gave.
func applySecurity(opt *vk.ClientOption, cfg ClientConfig) error {
	if cfg.Username != "" {
		opt.Username = cfg.Username
	}
	if cfg.Password != "" {
		opt.Password = cfg.Password
	}
	return nil
}

// explainConnectError turns the server's answer to a failed handshake
// into what the operator must fix. It never quotes a
// password.
func explainConnectError(err error, where, user string) error {
	if err == nil {
		return nil
	}
	if user == "" {
		user = "default"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "WRONGPASS"):
		return fmt.Errorf("valkey: authentication to %s failed for user %q: wrong password, or the user does not exist or is disabled (check the URL, --valkey-user, --valkey-password-file or FABRIC_VALKEY_PASSWORD): %w", where, user, err)
	case strings.Contains(msg, "NOAUTH"):
		return fmt.Errorf("valkey: %s requires authentication and no password was given (URL, --valkey-password-file or FABRIC_VALKEY_PASSWORD): %w", where, err)
	case strings.Contains(msg, "NOPERM"):
		return fmt.Errorf("valkey: user %q on %s lacks a permission fabric needs (its ACL must allow fabric's commands, keys and channels): %w", user, where, err)
	}
	return err
}
