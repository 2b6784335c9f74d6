/* One exec's egress record (egress_log.h): exact counts, details up to a cap, each string from a
 * request kept terminal-safe. One mutex: the proxy appends from its thread while the records read.
 * No I/O. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "clock.h"
#include "egress_log.h"
#include "textesc.h"

/* The strings of a detail, in the order the JSON's "escaped" and "cut" lists name them. */
enum detail_field { F_METHOD, F_HOST, F_PATH, F_VERB, F_GROUP, F_RESOURCE, F_SUBRESOURCE, F_NAMESPACE, F_NAME, F_COUNT };

static const char *const field_names[F_COUNT] = {"method", "host", "path", "verb", "group", "resource",
						 "subresource", "namespace", "name"};

struct egress_detail {
	char *text[F_COUNT];     /* terminal-safe; NULL: absent */
	unsigned escaped, cut;   /* a bit per field */
	bool k8s, dry_run, upgrade, refused, mutating;
	int status;
	uint64_t bytes_up, bytes_down, duration_ms;
};

struct egress_log {
	pthread_mutex_t lock;
	pthread_cond_t ended;           /* a begun request was appended (egress_log_drain waits on it) */
	unsigned in_flight;             /* begun (egress_log_begin), not yet appended */
	struct egress_counts counts;
	size_t details_max, n;
	struct egress_detail *details;  /* details_max of them, n used */
};

struct egress_log *egress_log_new(size_t details_max)
{
	struct egress_log *log = calloc(1, sizeof *log);
	pthread_condattr_t ca;

	if (log == NULL)
		return NULL;
	log->details = details_max > 0 ? calloc(details_max, sizeof *log->details) : NULL;
	if (details_max > 0 && log->details == NULL) {
		free(log);
		return NULL;
	}
	log->details_max = details_max;
	pthread_mutex_init(&log->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&log->ended, &ca);
	pthread_condattr_destroy(&ca);
	return log;
}

static void detail_free(struct egress_detail *d)
{
	for (int f = 0; f < F_COUNT; f++)
		free(d->text[f]);
}

void egress_log_free(struct egress_log *log)
{
	if (log == NULL)
		return;
	for (size_t i = 0; i < log->n; i++)
		detail_free(&log->details[i]);
	free(log->details);
	pthread_cond_destroy(&log->ended);
	pthread_mutex_destroy(&log->lock);
	free(log);
}

/* Status a mutating request was accepted with: a 2xx, or 101 (an upgrade started: a command runs). */
static bool accepted(int status)
{
	return (status >= 200 && status < 300) || status == 101;
}

/* With no Kubernetes attributes the method alone says it: only GET and HEAD read (a CONNECT's
 * tunnel carried what it carried, unread). */
static bool request_mutating(const struct egress_request *req)
{
	if (req->k8s != NULL)
		return k8s_request_mutating(req->k8s);
	return req->method == NULL || (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0);
}

static void counts_add(struct egress_counts *c, const struct egress_request *req, bool mutating)
{
	c->requests++;
	c->bytes_up += req->bytes_up;
	c->bytes_down += req->bytes_down;
	if (req->refused) {
		c->refused++;
		return;
	}
	if (mutating && accepted(req->status))
		c->mutating_accepted++;
	else if (mutating && req->status == 0)
		c->mutating_unanswered++;
}

/* Keep s (NULL: absent) as field f of d, terminal-safe, cut to EGRESS_LOG_STRING_MAX bytes. */
static bool field_keep(struct egress_detail *d, enum detail_field f, const char *s)
{
	size_t len, out_len;
	bool escaped;

	if (s == NULL)
		return true;
	len = strlen(s);
	if (len > EGRESS_LOG_STRING_MAX) {
		len = EGRESS_LOG_STRING_MAX;
		d->cut |= 1u << f;
	}
	d->text[f] = textesc_encode((const uint8_t *)s, len, &out_len, &escaped);
	if (escaped)
		d->escaped |= 1u << f;
	return d->text[f] != NULL;
}

static bool detail_make(struct egress_detail *d, const struct egress_request *req, bool mutating)
{
	const struct k8s_request *k = req->k8s;
	bool ok;

	memset(d, 0, sizeof *d);
	ok = field_keep(d, F_METHOD, req->method != NULL ? req->method : "") &&
	     field_keep(d, F_HOST, req->host != NULL ? req->host : "") && field_keep(d, F_PATH, req->path);
	if (ok && k != NULL)
		ok = field_keep(d, F_VERB, k->verb) && field_keep(d, F_GROUP, k->group) &&
		     field_keep(d, F_RESOURCE, k->resource) && field_keep(d, F_SUBRESOURCE, k->subresource) &&
		     field_keep(d, F_NAMESPACE, k->namespace) && field_keep(d, F_NAME, k->name);
	if (!ok) {
		detail_free(d);
		return false;
	}
	d->k8s = k != NULL;
	d->dry_run = k != NULL && k->dry_run;
	d->upgrade = k != NULL && k->upgrade;
	d->refused = req->refused;
	d->mutating = mutating;
	d->status = req->status;
	d->bytes_up = req->bytes_up;
	d->bytes_down = req->bytes_down;
	d->duration_ms = req->duration_ms;
	return true;
}

void egress_log_append(struct egress_log *log, const struct egress_request *req)
{
	bool mutating = request_mutating(req);
	struct egress_detail d;
	bool kept;

	/* The strings are encoded outside the lock: the proxy's thread holds it only to count and store. */
	kept = log->details_max > 0 && detail_make(&d, req, mutating);
	pthread_mutex_lock(&log->lock);
	counts_add(&log->counts, req, mutating);
	if (req->begun && log->in_flight > 0) {
		log->in_flight--;
		pthread_cond_broadcast(&log->ended);
	}
	if (kept && log->n < log->details_max) {
		log->details[log->n++] = d;
		kept = false;
	} else {
		log->counts.details_dropped++;
	}
	pthread_mutex_unlock(&log->lock);
	if (kept)
		detail_free(&d);  /* the cap was reached meanwhile */
}

void egress_log_counts(struct egress_log *log, struct egress_counts *out)
{
	pthread_mutex_lock(&log->lock);
	*out = log->counts;
	pthread_mutex_unlock(&log->lock);
}

bool egress_log_mutating_accepted(struct egress_log *log)
{
	struct egress_counts c;

	egress_log_counts(log, &c);
	return c.mutating_accepted > 0 || c.mutating_unanswered > 0;
}

/* ["path", ...] of the fields whose bit is set in bits, or NULL when none is. */
static json_t *field_list(unsigned bits)
{
	json_t *list;

	if (bits == 0)
		return NULL;
	list = json_array();
	for (int f = 0; f < F_COUNT && list != NULL; f++)
		if ((bits & (1u << f)) != 0 && json_array_append_new(list, json_string(field_names[f])) < 0) {
			json_decref(list);
			list = NULL;
		}
	return list;
}

static json_t *detail_k8s_json(const struct egress_detail *d)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b, s:b}", "verb", d->text[F_VERB], "group", d->text[F_GROUP],
			 "resource", d->text[F_RESOURCE], "subresource", d->text[F_SUBRESOURCE], "namespace",
			 d->text[F_NAMESPACE], "name", d->text[F_NAME], "dry_run", d->dry_run, "upgrade", d->upgrade);
}

static json_t *detail_json(const struct egress_detail *d)
{
	cleanup_json json_t *o = json_pack("{s:s, s:s, s:i, s:b, s:b, s:I, s:I, s:I}", "method", d->text[F_METHOD], "host",
					   d->text[F_HOST], "status", d->status, "refused", d->refused, "mutating",
					   d->mutating, "bytes_up", (json_int_t)d->bytes_up, "bytes_down",
					   (json_int_t)d->bytes_down, "duration_ms", (json_int_t)d->duration_ms);

	if (o == NULL)
		return NULL;
	if (d->text[F_PATH] != NULL && json_object_set_new(o, "path", json_string(d->text[F_PATH])) < 0)
		return NULL;
	if (d->k8s && json_object_set_new(o, "kubernetes", detail_k8s_json(d)) < 0)
		return NULL;
	if (d->escaped != 0 && json_object_set_new(o, "escaped", field_list(d->escaped)) < 0)
		return NULL;
	if (d->cut != 0 && json_object_set_new(o, "cut", field_list(d->cut)) < 0)
		return NULL;
	return steal_pointer(&o);
}

static json_t *counts_json(const struct egress_counts *c)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "requests", (json_int_t)c->requests, "refused",
			 (json_int_t)c->refused, "mutating_accepted", (json_int_t)c->mutating_accepted,
			 "mutating_unanswered", (json_int_t)c->mutating_unanswered, "bytes_up", (json_int_t)c->bytes_up,
			 "bytes_down", (json_int_t)c->bytes_down, "details_dropped", (json_int_t)c->details_dropped);
}

static json_t *log_json_locked(struct egress_log *log)
{
	cleanup_json json_t *o = counts_json(&log->counts);
	json_t *details = json_array();

	if (o == NULL || json_object_set_new(o, "details", details) < 0)
		return NULL;
	for (size_t i = 0; i < log->n; i++)
		if (json_array_append_new(details, detail_json(&log->details[i])) < 0)
			return NULL;
	return steal_pointer(&o);
}

json_t *egress_log_json(struct egress_log *log)
{
	json_t *o;

	pthread_mutex_lock(&log->lock);
	o = log_json_locked(log);
	pthread_mutex_unlock(&log->lock);
	return o;
}

void egress_log_begin(struct egress_log *log)
{
	pthread_mutex_lock(&log->lock);
	log->in_flight++;
	pthread_mutex_unlock(&log->lock);
}

json_t *egress_log_drain(struct egress_log *log, int wait_ms)
{
	struct timespec until;
	json_t *o = NULL;

	clock_mono_timespec_after(wait_ms, &until);
	pthread_mutex_lock(&log->lock);
	/* The exec's processes are gone, so its connections are closing: their requests end within a
	 * moment (an edge notices a closed sandbox within its second's poll) and go with this exec. */
	while (log->in_flight > 0 && pthread_cond_timedwait(&log->ended, &log->lock, &until) == 0)
		;
	if (log->counts.requests > 0 || log->counts.details_dropped > 0 || log->in_flight > 0) {
		o = log_json_locked(log);
		/* Still open past the wait: said, and recorded with whichever exec is running when they end. */
		if (o != NULL && log->in_flight > 0)
			json_object_set_new(o, "unfinished", json_integer(log->in_flight));
		/* Only once it is said: an exec's requests go with its record, never with the next's. */
		if (o != NULL) {
			for (size_t i = 0; i < log->n; i++)
				detail_free(&log->details[i]);
			log->n = 0;
			memset(&log->counts, 0, sizeof log->counts);
		}
	}
	pthread_mutex_unlock(&log->lock);
	return o;
}

static void detail_line(FILE *f, const struct egress_detail *d)
{
	fprintf(f, "%s %s%s%s %d%s %llums up %llu down %llu", d->text[F_METHOD], d->text[F_HOST],
		d->text[F_PATH] != NULL ? " " : "", d->text[F_PATH] != NULL ? d->text[F_PATH] : "", d->status,
		d->refused ? " refused" : "", (unsigned long long)d->duration_ms, (unsigned long long)d->bytes_up,
		(unsigned long long)d->bytes_down);
	if (d->k8s)
		fprintf(f, " %s %s%s%s%s%s %s%s%s%s%s", d->text[F_VERB], d->text[F_GROUP], d->text[F_GROUP][0] != '\0' ? "/" : "",
			d->text[F_RESOURCE], d->text[F_SUBRESOURCE][0] != '\0' ? "/" : "", d->text[F_SUBRESOURCE],
			d->text[F_NAMESPACE], d->text[F_NAMESPACE][0] != '\0' ? "/" : "", d->text[F_NAME],
			d->dry_run ? " dry-run" : "", d->upgrade ? " upgrade" : "");
	fputc('\n', f);
}

char *egress_log_text(struct egress_log *log)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct egress_counts c;

	if (f == NULL)
		return NULL;
	pthread_mutex_lock(&log->lock);
	for (size_t i = 0; i < log->n; i++)
		detail_line(f, &log->details[i]);
	c = log->counts;
	pthread_mutex_unlock(&log->lock);
	fprintf(f, "%llu requests, %llu refused, %llu mutating accepted, %llu mutating unanswered, %llu bytes up, %llu down, %llu details dropped\n",
		(unsigned long long)c.requests, (unsigned long long)c.refused, (unsigned long long)c.mutating_accepted,
		(unsigned long long)c.mutating_unanswered, (unsigned long long)c.bytes_up, (unsigned long long)c.bytes_down,
		(unsigned long long)c.details_dropped);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
