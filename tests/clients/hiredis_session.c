/* A scripted session through hiredis (Debian's libhiredis-dev), run against
 * tierkv-server and redis-server by tests/integration/test_real_clients.py,
 * which compares what it prints. Every reply is printed in one canonical
 * text form, so any difference in type, value or error text shows.
 *
 * Usage: hiredis_session PORT   (connects to 127.0.0.1)
 * Exit status: 0 when the session ran, 1 if the connection failed. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_reply(const redisReply* r, int depth) {
  printf("%*s", depth * 2, "");
  switch (r->type) {
    case REDIS_REPLY_STRING:
      printf("string(%zu) ", r->len);
      for (size_t i = 0; i < r->len; ++i) {
        unsigned char ch = (unsigned char)r->str[i];
        if (ch < 0x20 || ch > 0x7e)
          printf("\\x%02x", ch);
        else
          putchar(ch);
      }
      printf("\n");
      break;
    case REDIS_REPLY_STATUS:
      printf("status %s\n", r->str);
      break;
    case REDIS_REPLY_ERROR:
      printf("error %s\n", r->str);
      break;
    case REDIS_REPLY_INTEGER:
      printf("integer %lld\n", r->integer);
      break;
    case REDIS_REPLY_NIL:
      printf("nil\n");
      break;
    case REDIS_REPLY_ARRAY:
      printf("array(%zu)\n", r->elements);
      for (size_t i = 0; i < r->elements; ++i) print_reply(r->element[i], depth + 1);
      break;
    default:
      printf("type %d\n", r->type);
  }
}

/* Runs one command given as a format string and prints its reply. */
static int run(redisContext* c, const char* label, redisReply* r) {
  if (r == NULL) {
    fprintf(stderr, "%s: connection error: %s\n", label, c->errstr);
    return 1;
  }
  printf("%s: ", label);
  print_reply(r, 0);
  freeReplyObject(r);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hiredis_session PORT\n");
    return 2;
  }
  struct timeval timeout = {5, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", atoi(argv[1]), timeout);
  if (c == NULL || c->err) {
    fprintf(stderr, "cannot connect: %s\n", c ? c->errstr : "out of memory");
    return 1;
  }
  /* A binary value with NUL and CR LF inside, sent with %b. */
  const char binary[] = {'a', '\0', '\r', '\n', 'b'};
  int failed = 0;
  failed |= run(c, "flushall", redisCommand(c, "FLUSHALL"));
  failed |= run(c, "ping", redisCommand(c, "PING"));
  failed |= run(c, "set", redisCommand(c, "SET %s %s", "greeting", "hello world"));
  failed |= run(c, "get", redisCommand(c, "GET %s", "greeting"));
  failed |= run(c, "set-binary", redisCommand(c, "SET %s %b", "bin", binary, sizeof(binary)));
  failed |= run(c, "get-binary", redisCommand(c, "GET %s", "bin"));
  failed |= run(c, "strlen", redisCommand(c, "STRLEN %s", "bin"));
  failed |= run(c, "incr", redisCommand(c, "INCRBY %s %d", "counter", 41));
  failed |= run(c, "incr-again", redisCommand(c, "INCR %s", "counter"));
  failed |= run(c, "incr-wrong", redisCommand(c, "INCR %s", "greeting"));
  failed |= run(c, "mget", redisCommand(c, "MGET greeting missing counter"));
  failed |= run(c, "missing", redisCommand(c, "GET %s", "missing"));
  failed |= run(c, "setex", redisCommand(c, "SET %s %s EX %d", "ttl", "v", 100));
  failed |= run(c, "ttl", redisCommand(c, "TTL %s", "ttl"));
  failed |= run(c, "unknown", redisCommand(c, "NOSUCHCOMMAND x"));
  failed |= run(c, "arity", redisCommand(c, "GET"));
  /* A transaction with a command that fails inside EXEC. */
  failed |= run(c, "multi", redisCommand(c, "MULTI"));
  failed |= run(c, "queued-set", redisCommand(c, "SET %s %s", "t", "1"));
  failed |= run(c, "queued-incr", redisCommand(c, "INCR %s", "t"));
  failed |= run(c, "queued-bad", redisCommand(c, "INCR %s", "greeting"));
  failed |= run(c, "exec", redisCommand(c, "EXEC"));
  /* A pipeline: appended, then read back in order. */
  for (int i = 0; i < 100; ++i) redisAppendCommand(c, "SET key:%d %d", i, i * i);
  redisAppendCommand(c, "GET key:%d", 99);
  redisAppendCommand(c, "DEL key:1 key:2 key:nope");
  redisAppendCommand(c, "EXISTS key:0 key:1 key:3");
  for (int i = 0; i < 103; ++i) {
    redisReply* r = NULL;
    if (redisGetReply(c, (void**)&r) != REDIS_OK) {
      fprintf(stderr, "pipeline reply %d: %s\n", i, c->errstr);
      return 1;
    }
    if (i >= 98)
      failed |= run(c, "pipelined", r);
    else
      freeReplyObject(r);
  }
  failed |= run(c, "dbsize", redisCommand(c, "DBSIZE"));
  redisFree(c);
  return failed;
}
