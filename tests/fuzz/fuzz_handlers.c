/* libFuzzer target: the agent's request handlers (sandbox-agent/serve_conn.c) on a stream of framed
 * envelopes. Exec requests go through exec_refusal and request_from_exec only: this target must
 * never run a command. Query, Cancel, Ping and unexpected messages go through conn_dispatch with
 * a journal in a private temporary directory, and each answer is written to a memory stream.
 *
 * serve_conn.c keeps its handlers static, so this file includes it (renaming its three exported
 * symbols); the refactor that would make this unnecessary is a small sandbox-agent/serve_handlers.h. */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define serve_conn_start fuzz_unused_serve_conn_start
#define serve_conn_init fuzz_unused_serve_conn_init
#define serve_spare_make fuzz_unused_serve_spare_make
#include "../../sandbox-agent/serve_conn.c"
#undef serve_conn_start

#define FUZZ_CAP (64u * 1024u)

struct mem {
	const uint8_t *p;
	size_t len, pos;
	size_t written;
};

static ssize_t mem_read(void *ctx, void *buf, size_t len)
{
	struct mem *m = ctx;
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;

	memcpy(buf, m->p + m->pos, n);
	m->pos += n;
	return (ssize_t)n;
}

/* The agent's answers: counted and dropped. */
static ssize_t mem_write(void *ctx, const void *buf, size_t len)
{
	struct mem *m = ctx;

	(void)buf;
	m->written += len;
	return (ssize_t)len;
}

static struct agent fuzz_agent;
static char fuzz_dir[] = "/tmp/fuzz_handlers.XXXXXX";
static char fuzz_env_store[BOUNDARY_MAX_ENV][ENV_ENTRY_MAX];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* The journal is scratch: gone when the fuzzer exits normally. */
static void fuzz_dir_remove(void)
{
	nftw(fuzz_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sb_err err;

	(void)argc;
	(void)argv;
	setenv("SANDBOX_LOG_LEVEL", "error", 1);  /* every refusal logs at info: too slow, too loud */
	if (mkdtemp(fuzz_dir) == NULL)
		abort();
	atexit(fuzz_dir_remove);
	fuzz_agent.generation = 1;
	/* The agent's own layout (serve.c agent_paths): the state directory, then receipts/ and journal/
	 * held by descriptor beneath it. */
	if (privdir_open(&fuzz_agent.state, fuzz_dir, false, 022, &err) < 0 ||
	    privdir_open_at(&fuzz_agent.receipts, &fuzz_agent.state, "receipts", true, 077, &err) < 0 ||
	    privdir_open_at(&fuzz_agent.journal_dir, &fuzz_agent.state, "journal", true, 077, &err) < 0 ||
	    journal_open(&fuzz_agent.journal, &fuzz_agent.journal_dir, &fuzz_agent.receipts, &err) < 0) {
		fprintf(stderr, "fuzz_handlers: %s\n", err.msg);
		abort();
	}
	/* One finished and one running entry, so Query finds all three states. */
	if (journal_begin(&fuzz_agent.journal, "done-1", 1, &err) < 0 ||
	    journal_finish(&fuzz_agent.journal, "done-1", 1, "{\"exec_id\":\"done-1\"}", "{\"r\":1}", &err) < 0 ||
	    journal_begin(&fuzz_agent.journal, "run-1", 1, &err) < 0) {
		fprintf(stderr, "fuzz_handlers: %s\n", err.msg);
		abort();
	}
	fuzz_agent.cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fuzz_agent.cancel_efd < 0)
		abort();
	pthread_mutex_init(&fuzz_agent.lock, NULL);
	/* An exec "running", so a Cancel can hit. */
	fuzz_agent.busy = true;
	snprintf(fuzz_agent.running_id, sizeof fuzz_agent.running_id, "run-1");
	return 0;
}

/* What handle_exec does before it runs anything. */
static void exec_check(Sandbox__Exec *e)
{
	struct exec_request req;

	if (exec_refusal(&fuzz_agent, e) != NULL)
		return;
	request_from_exec(e, "/bin/bash", &req, fuzz_env_store);
	if (req.n_env != e->n_env + 1 || req.n_env >= BOUNDARY_MAX_ENV || strcmp(req.env[0], "SHELL=/bin/bash") != 0 ||
	    strlen(req.exec_id) > EXEC_ID_MAX)
		abort();
	for (size_t i = 0; i < req.n_env; i++)
		if (strchr(req.env[i], '=') == NULL)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mem m = { .p = data, .len = size };
	struct conn c = { .agent = &fuzz_agent, .fd = -1 };
	uint64_t drained;

	c.stream = (struct sb_stream){ .ctx = &m, .read = mem_read, .write = mem_write };
	for (int i = 0; i < 64; i++) {
		Sandbox__Envelope *env = NULL;
		struct sb_err err;
		int rc = proto_recv(&c.stream, FUZZ_CAP, &env, &err);

		if (rc == 0 || (rc < 0 && err.errnum != EBADMSG))
			break;
		if (rc < 0)
			continue;
		if (env->body_case == SANDBOX__ENVELOPE__BODY_EXEC)
			exec_check(env->exec);
		else
			(void)conn_dispatch(&c, env);
		proto_free(env);
	}
	while (read(fuzz_agent.cancel_efd, &drained, sizeof drained) == sizeof drained) {
	}
	return 0;
}
