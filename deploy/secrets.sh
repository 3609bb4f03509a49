#!/usr/bin/env bash
# Writes the files a kustomize overlay generates its Secrets from, with
# random passwords. They are never committed (.gitignore); without them
# `kubectl apply -k` stops with a missing-file error.
#
#   k8s/overlays/<overlay>/secrets/nats-passwords.env   Secret nats-passwords
#       NATS_ADMIN_PASSWORD (`swarm setup`), NATS_BOSS_PASSWORD,
#       NATS_MANAGER_PASSWORD, NATS_WORKER_PASSWORD, NATS_APPROVER_PASSWORD,
#       NATS_CLIENT_PASSWORD, NATS_GATEWAY_PASSWORD (the users),
#       NATS_ROUTE_PASSWORD (the routes between NATS nodes)
#   k8s/overlays/<overlay>/secrets/llm-keys.env         Secret llm-keys
#       OPENAI_API_KEY, ANTHROPIC_API_KEY: empty; fill in the ones you use
#   k8s/overlays/<overlay>/secrets/gateway-tokens.env   Secret gateway-tokens
#       SWARM_GATEWAY_TOKENS: the A2A gateway's callers, `name:token`
#       entries separated by commas; one caller, `a2a`, to begin with
#
# A value already in a file is kept, unless it is empty or a known
# placeholder (`change-me`, `placeholder`); a missing one is added. So the
# script is safe to run again, and adds what a newer Swarm needs (say
# NATS_ROUTE_PASSWORD to an older file). Values are never printed.
#
# Usage: deploy/secrets.sh [--rotate NAME]... [OVERLAY]...
#   OVERLAY      `dev`, `prod` (k8s/overlays/<name>) or an overlay's
#                directory; default: dev and prod
#   --rotate N   give the password N (NATS_ROUTE_PASSWORD, ...) a new
#                random value; docs/deploy.md, "Rotating credentials", says
#                how to roll it out
#
# Passwords are 40 letters and digits starting with a letter: safe in a
# route URL, and never read as a number or boolean by nats-server (which
# parses a variable's value as config).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

readonly PASSWORDS=(NATS_ADMIN_PASSWORD NATS_BOSS_PASSWORD NATS_MANAGER_PASSWORD
    NATS_WORKER_PASSWORD NATS_CLIENT_PASSWORD NATS_APPROVER_PASSWORD NATS_GATEWAY_PASSWORD
    NATS_ROUTE_PASSWORD)
readonly TOKENS=(SWARM_GATEWAY_TOKENS)
readonly LLM_KEYS=(OPENAI_API_KEY ANTHROPIC_API_KEY)

log() { echo "secrets.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Prints the usage lines of the header; exits with $1 (0 for --help).
usage() {
    local text
    text="$(sed -n '/^# Usage:/,/^#   *how to roll/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//')"
    if (($1 == 0)); then echo "$text"; else echo "$text" >&2; fi
    exit "$1"
}

# 40 random letters and digits, the first a letter. The random bytes are
# read into variables (not piped into `head`), so no process dies of SIGPIPE.
random_password() {
    local chars letters
    chars="$(head -c 2048 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9')"
    letters="$(head -c 512 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z')"
    ((${#chars} >= 39 && ${#letters} >= 1)) || die "too few random characters from /dev/urandom"
    printf '%s%s' "${letters:0:1}" "${chars:0:39}"
}

# Whether the value $1 must be replaced: empty, or a placeholder. (No
# bash 4 features here or below: macOS ships bash 3.2.)
unusable() {
    local v
    v="$(printf '%s' "$1" | tr '[:upper:]' '[:lower:]')"
    [[ -z "$v" || "$v" == *change-me* || "$v" == *placeholder* ]]
}

rotate=()
overlays=()
while (($#)); do
    case "$1" in
        --rotate)
            (($# >= 2)) || usage 2
            [[ " ${PASSWORDS[*]} " == *" $2 "* ]] \
                || die "--rotate $2: not one of ${PASSWORDS[*]}"
            rotate+=("$2")
            shift 2
            ;;
        -h | --help) usage 0 ;;
        -*) usage 2 ;;
        *)
            overlays+=("$1")
            shift
            ;;
    esac
done
((${#overlays[@]})) || overlays=(dev prod)

# Files are readable by their owner only.
umask 077
# A temporary file left by a failed run is removed.
tmp=""
trap '[[ -z "$tmp" ]] || rm -f "$tmp"' EXIT

# Brings the env file $1 up to date: keeps its lines, replaces the values
# of the variables in $rotate and the unusable passwords, and appends the
# missing variables of $2.. (passwords random, other keys empty). Written
# to a temporary file and renamed, so an interrupted run leaves the old file.
update_file() {
    local file="$1" kind="$2"
    shift 2
    local names=("$@") line name value password changed=() seen=" "
    tmp="$(mktemp "$file.XXXXXX")"
    if [[ -f "$file" ]]; then
        while IFS= read -r line || [[ -n "$line" ]]; do
            name="${line%%=*}"
            value="${line#*=}"
            if [[ "$kind" != llm && "$line" == *=* && " ${names[*]} " == *" $name "* ]]; then
                if [[ " ${rotate[*]} " == *" $name "* ]] || unusable "$value"; then
                    password="$(random_password)"
                    if [[ "$kind" == tokens ]]; then
                        line="$name=a2a:$password"
                    else
                        line="$name=$password"
                    fi
                    changed+=("$name")
                fi
            fi
            if [[ "$line" == *=* ]]; then
                seen+="$name "
            fi
            printf '%s\n' "$line" >>"$tmp"
        done <"$file"
    elif [[ "$kind" == llm ]]; then
        printf '%s\n' "# LLM provider keys for the workers and the boss; leave a key empty" \
            "# when its provider is not used (the offline provider needs none)." >>"$tmp"
    fi
    for name in "${names[@]}"; do
        if [[ "$seen" == *" $name "* ]]; then
            continue
        fi
        if [[ "$kind" == passwords ]]; then
            password="$(random_password)"
            printf '%s=%s\n' "$name" "$password" >>"$tmp"
        elif [[ "$kind" == tokens ]]; then
            password="$(random_password)"
            printf '%s=a2a:%s\n' "$name" "$password" >>"$tmp"
        else
            printf '%s=\n' "$name" >>"$tmp"
        fi
        changed+=("$name")
    done
    mv -f "$tmp" "$file"
    tmp=""
    if ((${#changed[@]})); then
        log "${file#"$repo"/}: set ${changed[*]}"
    else
        log "${file#"$repo"/}: up to date"
    fi
}

for overlay in "${overlays[@]}"; do
    # A bare name is an overlay of this repository; anything else a path.
    if [[ "$overlay" != */* && -d "$repo/k8s/overlays/$overlay" ]]; then
        dir="$repo/k8s/overlays/$overlay"
    else
        dir="$overlay"
    fi
    [[ -f "$dir/kustomization.yaml" ]] || die "$overlay: no kustomization.yaml in $dir"
    mkdir -p "$dir/secrets"
    update_file "$dir/secrets/nats-passwords.env" passwords "${PASSWORDS[@]}"
    update_file "$dir/secrets/llm-keys.env" llm "${LLM_KEYS[@]}"
    update_file "$dir/secrets/gateway-tokens.env" tokens "${TOKENS[@]}"
done
