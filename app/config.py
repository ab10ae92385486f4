"""Documented defaults; instance/config.py and then environment variables override them."""

# Database: SQLite file (a relative path is relative to the project folder) or PostgreSQL,
# e.g. postgresql://user:password@host:5432/voiceagent.
DATABASE_URL = "sqlite:///instance/voiceagent.db"

# Redis for the RQ queues and the shared rate-limit counters. Unset: jobs run in-process.
REDIS_URL = None

# "rq" sends jobs to worker.py through Redis; "inline" runs them in the web process after commit.
# Unset: "rq" when REDIS_URL is set, "inline" otherwise.
QUEUE_MODE = None

# Bearer token of the voice runtime for /internal/v1. Unset: the runtime API answers 503.
RUNTIME_TOKEN = None

# Development and tests only: admit http:// and loopback/private hosts for webhooks and
# function endpoints.
ALLOW_PRIVATE_URLS = False

# Per-tenant rate limits (SPEC.md section 8). Counters live in Redis when REDIS_URL is set.
RATELIMIT_ENABLED = True

# Idempotency-Key: how long a key whose first request is still running stays held. Longer
# than any request can take (gunicorn recycles a worker stuck for WEB_TIMEOUT, 30 s): past
# it the request's process is taken for dead and a repeat may run the request again.
IDEMPOTENCY_LEASE_SECONDS = 60

# Caps per tenant (409 limit_reached beyond): one tenant's bulk is never every tenant's cost.
MAX_WEBHOOKS_PER_TENANT = 50
MAX_AGENTS_PER_TENANT = 1000
MAX_FUNCTIONS_PER_AGENT = 64
MAX_ACTIVE_KEYS_PER_TENANT = 100
MAX_USERS_PER_TENANT = 20
MAX_CONTACTS_PER_CAMPAIGN = 10000
MAX_CAMPAIGNS_PER_TENANT = 50  # running or paused
MAX_WHATSAPP_ACCOUNTS_PER_TENANT = 5

# The key that encrypts the provider secrets stored for tenants (a WhatsApp Business
# account's access token and app secret): a Fernet key, as printed by
# `python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`.
# Several keys separated by commas rotate it: the first encrypts, every one decrypts. Unset:
# linking a WhatsApp Business account answers 503 not_configured. make run generates one.
SECRETS_KEY = None

# Meta's Graph API, where WhatsApp Business accounts' numbers, call permissions and messages
# are read and sent (an operator's setting: tests point it at a stand-in on 127.0.0.1). Each
# Graph request gets WHATSAPP_GRAPH_CONNECT_TIMEOUT seconds to connect and
# WHATSAPP_GRAPH_TIMEOUT seconds in all, on the wall clock.
WHATSAPP_GRAPH_URL = "https://graph.facebook.com/v23.0"
WHATSAPP_GRAPH_CONNECT_TIMEOUT = 3.0
WHATSAPP_GRAPH_TIMEOUT = 10.0
# How many Graph requests one tenant may have under way at once (429 whatsapp_busy beyond),
# so that a tenant whose requests Meta answers slowly holds up no other tenant's.
WHATSAPP_GRAPH_TENANT_PLACES = 2

# Post-call analysis (DESIGN.md section 17): after a call with turns ends, one structured-output
# request to Gemini's generateContent at GEMINI_API_URL (an operator's setting: tests point it
# at a stand-in on 127.0.0.1) with ANALYSIS_MODEL. Unset GEMINI_API_KEY: no request, and each
# call's analysis is not_configured. A request gets ANALYSIS_CONNECT_TIMEOUT seconds to connect
# and ANALYSIS_TIMEOUT seconds in all, on the wall clock; a timeout, a 429, a 5xx or an answer
# that is not JSON is tried again after each of ANALYSIS_RETRY_DELAYS (seconds), then the
# analysis is failed. Its cost, recorded in IDR from the answer's token counts at these prices
# per million tokens (Gemini 2.5 Flash's list price at about IDR 16,500 to the dollar), is
# never billed to the tenant.
GEMINI_API_KEY = None
GEMINI_API_URL = "https://generativelanguage.googleapis.com"
ANALYSIS_MODEL = "gemini-2.5-flash"
ANALYSIS_CONNECT_TIMEOUT = 3.0
ANALYSIS_TIMEOUT = 30.0
ANALYSIS_RETRY_DELAYS = (10, 60, 300)
ANALYSIS_INPUT_IDR_PER_MILLION_TOKENS = 4950
ANALYSIS_OUTPUT_IDR_PER_MILLION_TOKENS = 41250

# flask maintenance prune deletes delivery attempts and finished events older than this.
RETENTION_DAYS = 30

# Bearer token for GET /metrics (Prometheus). Unset: /metrics answers 404.
METRICS_TOKEN = None

# Logs: "json" (one JSON object a line, for production) or "text" (development).
LOG_FORMAT = "json"
LOG_LEVEL = "INFO"
# The level of RQ's own lines in worker.py's job processes. At INFO RQ writes four lines a job
# (taken, completed, OK, how long its result is kept), several a call, each costing the
# workers CPU; at WARNING its warnings and failed jobs are still written.
JOB_LOG_LEVEL = "WARNING"

# Webhook delivery: seconds to connect, and seconds for the whole attempt, connecting,
# headers and body included, on the wall clock however slowly the receiver sends (a 2xx
# within this is a success); and how long a job holds a delivery before another may take it
# over (at least WEBHOOK_TIMEOUT + 2: RQ stops the job a second before its lease ends).
WEBHOOK_CONNECT_TIMEOUT = 3.0
WEBHOOK_TIMEOUT = 10.0
WEBHOOK_LEASE_SECONDS = 20

# Multiplies every retry delay (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h). Tests shrink it.
WEBHOOK_RETRY_SCALE = 1.0

# Seconds between two runs of the sweeper that enqueues due deliveries (in worker.py, and in
# the web process in inline mode).
SWEEP_INTERVAL = 5.0

# RQ workers of worker.py for each queue: how many function calls it makes at once (each
# waits at most the function's timeoutMs, 5 s at most, for the tenant's endpoint), how many
# function tests (POST /agents/:id/functions/:name/test: on a queue and workers of their own,
# so a test never takes a worker a live call waits for), and how many deliveries it sends at
# once (so a slow receiver holds up one of them, not every tenant's events).
FUNCTION_WORKERS = 8
FUNCTION_TEST_WORKERS = 2
WEBHOOK_WORKERS = 4

# A tenant's live function calls take at most this share of FUNCTION_WORKERS at once, and its
# function tests this share of FUNCTION_TEST_WORKERS (at least one of each); one beyond it is
# answered function_busy at once rather than waiting behind the tenant's own slow endpoints,
# so other tenants' calls and tests always find a worker. Function calls mostly wait on the
# network: raise FUNCTION_WORKERS for tenants with many calls at once.
FUNCTION_TENANT_SHARE = 0.5

# Fair delivery. A webhook has at most WEBHOOK_IN_FLIGHT_PER_WEBHOOK attempts in flight, and a
# tenant at most WEBHOOK_TENANT_SHARE of a lane's workers (at least one): the rest of its
# deliveries wait in the database and go as places free. A webhook whose attempt timed out is
# sent in the slow lane (the webhooks_slow queue, served by WEBHOOK_SLOW_WORKERS workers of
# worker.py) until it answers in time again, so slow receivers never hold the others' workers.
WEBHOOK_IN_FLIGHT_PER_WEBHOOK = 2
WEBHOOK_TENANT_SHARE = 0.5
WEBHOOK_SLOW_WORKERS = 2
# RQ workers of a worker.py serving webhooks for the whatsapp queue: campaign contacts' call
# permission checks and requests to Meta, apart from the deliveries. More than
# WHATSAPP_GRAPH_TENANT_PLACES, so a tenant whose requests Meta answers slowly holds some of
# them, never all (its jobs beyond its places are answered whatsapp_busy at once and retried
# at the contact's next recheck).
WHATSAPP_WORKERS = 3
# RQ workers of a worker.py serving webhooks for the analysis queue (post-call analyses, each a
# request to Gemini). One tenant's analyses take at most ANALYSIS_TENANT_SHARE of them at once
# (at least one); its others wait in Redis's schedule, ANALYSIS_BUSY_DELAY seconds at a time,
# so a burst of one tenant's calls never delays another tenant's analyses.
ANALYSIS_WORKERS = 2
ANALYSIS_TENANT_SHARE = 0.5
ANALYSIS_BUSY_DELAY = 2.0
# An analysis still pending this many seconds after it was asked for lost its job (Redis was
# down when the call ended, or its worker died): the sweep asks for it again, at most
# ANALYSIS_SWEEP_BATCH a sweep, the tenants' in turn. Far above the retries' backoff
# (ANALYSIS_RETRY_DELAYS and each attempt's ANALYSIS_TIMEOUT), so a job still retrying is
# not asked for twice.
ANALYSIS_STALE_SECONDS = 1800
ANALYSIS_SWEEP_BATCH = 200

# A worker serving only the webhooks queue lowers its CPU priority by this much (nice), so on
# a busy machine the web processes and the functions worker, on which a caller waits, run
# first. 0 keeps the priority it was started with.
WEBHOOK_WORKER_NICENESS = 10

# Flask's secret key: it signs the dashboard's session cookies, which is off until it is set
# to a long random value (API keys do not depend on it; they are stored hashed).
SECRET_KEY = "change-me"

# The dashboard's session cookie: HttpOnly and SameSite=Lax always; Secure (sent over https
# only) unless turned off for development on http://127.0.0.1. A session ends after 12 hours
# without a request.
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
PERMANENT_SESSION_LIFETIME = 12 * 3600

# Bodies over this many bytes are refused with 413.
MAX_CONTENT_LENGTH = 1024 * 1024

# How many reverse proxies (nginx, a load balancer) stand in front of the service and append
# the client's address to X-Forwarded-For. 0 trusts no such header: the address the service
# sees is the client's. Behind one nginx set 1, so the audit log and the sign-in throttle
# see each client's own address (werkzeug's ProxyFix; set it no higher than the real count,
# or clients could choose their address).
TRUSTED_PROXIES = 0

API_TITLE = "Voice Agent Management API"
API_VERSION = "v1"
OPENAPI_VERSION = "3.0.3"
OPENAPI_URL_PREFIX = "/api/v1"
OPENAPI_JSON_PATH = "openapi.json"
OPENAPI_SWAGGER_UI_PATH = "docs"
# Where the docs page loads Swagger UI from: served by the app itself (swagger-ui-bundle).
OPENAPI_SWAGGER_UI_URL = "/static/swagger-ui/"
API_SPEC_OPTIONS = {
    "info": {
        "description": (
            "Manage AI voice agents, phone numbers, calls, credits, webhooks and agent "
            "functions, and read the event log the webhooks deliver. Authenticate with the "
            "`x-api-key` header, or with `Authorization: Bearer` and the key (both at once must "
            "carry the same key). A read-only key (scope `read`) may only GET: anything else "
            "is 403 with code `insufficient_scope`; an expired or revoked key is 401.\n\n"
            "**Errors** always have the body "
            '`{"error": {"code", "message", "details", "requestId"}}`.\n\n'
            "**Request bodies** are JSON (415 otherwise) of at most 1 MiB (413), nested at most "
            "32 levels deep, without NaN, Infinity, numbers beyond a 64-bit float or integers "
            "of more than 4,300 digits (400). No string, id or query parameter may contain the "
            "NUL character U+0000: such a body or parameter is refused with 422, such an id "
            "with 404.\n\n"
            "**Request heads**: a request target (path and query) over 8,000 bytes is refused "
            "with 414 (`uri_too_long`), a header over 8,192 bytes (name and value) with 431 "
            "(`header_too_large`). Beyond the HTTP server's own limits (with the shipped "
            "gunicorn settings a request line over 8,190 bytes, a header over 16 KiB or more "
            "than 100 headers) the server answers 414 or 431 itself, as plain HTML.\n\n"
            "**Rate limits** are per tenant, all keys together: starter 60, business 300 "
            "requests per minute, enterprise as agreed. Every authenticated tenant API response "
            "carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` "
            "(Unix seconds when the one-minute window ends); over the limit the answer is 429 "
            "with `Retry-After` (seconds) and code `rate_limited`.\n\n"
            "**Retrying safely**: every POST takes an `Idempotency-Key` header (1–255 printable "
            "ASCII characters, scoped to the tenant). A repeat of the same request (method, "
            "path and body) with the same key within 24 hours changes nothing and gets the "
            "first answer again, with `Idempotent-Replayed: true`; answers of 500 or more are "
            "not stored. The same key with another request is 422 `idempotency_key_reused`; a "
            "repeat while the first is still running is 409 `idempotency_in_progress`. GET, "
            "PATCH and DELETE ignore the header."
        )
    }
}
