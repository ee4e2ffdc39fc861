package main

import (
	"fmt"
	"os"
	"strings"
)

// adminTokenEnv names the environment variable that carries the admin
// token when no --admin-token-file is given.
const adminTokenEnv = "FABRIC_ADMIN_TOKEN"

// readAdminToken returns the admin token: the first line of file when
// one is named, else $FABRIC_ADMIN_TOKEN, else "" (the console then
// refuses every write). An empty or unreadable file is an error: an
// operator who names one means to enable writes.
func readAdminToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(adminTokenEnv)), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token file: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("admin token file %s is empty", file)
	}
	return tok, nil
}
