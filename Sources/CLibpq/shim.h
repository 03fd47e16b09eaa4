#ifndef CLIBPQ_SHIM_H
#define CLIBPQ_SHIM_H
// libpq's API is not variadic: PQconnectdbParams and PQexecParams import directly.
#include <libpq-fe.h>

// PG_DIAG_* are character-literal macros ('C', 'M'); Swift imports only numeric and string macros.
static inline char *_Nullable clibpq_result_sqlstate(const PGresult *_Nullable result) {
    return PQresultErrorField(result, PG_DIAG_SQLSTATE);
}

// Same reason as above; only the primary message is exposed: DETAIL may echo row values.
static inline char *_Nullable clibpq_result_primary_message(const PGresult *_Nullable result) {
    return PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
}

// Same reason as above: the name of the constraint a statement violated (a name from the schema,
// never a value).
static inline char *_Nullable clibpq_result_constraint_name(const PGresult *_Nullable result) {
    return PQresultErrorField(result, PG_DIAG_CONSTRAINT_NAME);
}
#endif
