"""The HTTP edge: what meets the client's bytes and answers them. The aiohttp handlers of the
API (`handlers`), the server that shapes a parser's errors as JSON (`httpserver`), specroute's
own paths and their methods (`paths`, pure), `GET /openapi.json` (`openapi`) and who may read
the operator pages (`admin`). It takes a request's plan and bookkeeping from `router.request`
and the replicas' passing from `router.replicas`; nothing below it imports it."""
