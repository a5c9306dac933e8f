package archiltest

// ClientPackage is the vendor's published client the fake follows: the npm
// package "disk" (Archil's JavaScript client and CLI), whose dist/index.d.ts
// carries the control plane's OpenAPI types and whose dist/index.js speaks
// the object API. Every route, field and header the fake serves is in
// ClientSpec, checked against this package by TestClientSpec where npm
// can fetch it.
const ClientPackage = "disk@0.8.13"

// SpecFact is one thing the fake relies on, as the client's files say it:
// Needle appears verbatim in File (a path inside the npm package).
type SpecFact struct {
	What   string // what the fake takes from it
	File   string
	Needle string
}

// ClientSpec lists what the fake serves, each with where the vendor's client
// says so.
var ClientSpec = []SpecFact{
	// Control plane: routes and operations.
	{"list and create disks", "package/dist/index.d.ts", `"/api/disks": {`},
	{"list disks is GET", "package/dist/index.d.ts", `get: operations["listDisks"];`},
	{"create disk is POST", "package/dist/index.d.ts", `post: operations["createDisk"];`},
	{"get and delete one disk", "package/dist/index.d.ts", `"/api/disks/{id}": {`},
	{"get disk is GET", "package/dist/index.d.ts", `get: operations["getDisk"];`},
	{"delete disk is DELETE", "package/dist/index.d.ts", `delete: operations["deleteDisk"];`},
	{"exec on one disk", "package/dist/index.d.ts", `"/api/disks/{id}/exec": {`},
	{"exec is POST", "package/dist/index.d.ts", `post: operations["execDisk"];`},
	{"list filters by exact name", "package/dist/index.d.ts", `/** @description Filter disks by exact name match. */`},
	{"disk ids are dsk- and 16 hex", "package/dist/index.d.ts", "Disk ID (format `dsk-{16 hex chars}`)"},
	// Envelope and errors.
	{"envelope success flag", "package/dist/index.d.ts", `success: boolean;`},
	{"envelope error text", "package/dist/index.d.ts", `error: string;`},
	{"the client throws on success false", "package/dist/index.js", `if (!body.success) {`},
	{"the client reads data", "package/dist/index.js", `return body.data;`},
	// Create: idempotent by name.
	{"create 200 when the name exists alike", "package/dist/index.d.ts", `/** @description Disk with this name already exists and configuration matches (idempotent) */`},
	{"create 201 when made", "package/dist/index.d.ts", `/** @description Disk created successfully */`},
	{"create 409 when the name exists otherwise", "package/dist/index.d.ts", `/** @description Disk with this name already exists but configuration differs */`},
	{"create answers the disk id", "package/dist/index.d.ts", `diskId?: string;`},
	{"create answers the token users", "package/dist/index.d.ts", `authorizedUsers?: components["schemas"]["AuthorizedUser"][];`},
	{"create names a disk", "package/dist/index.d.ts", `@description Disk name (alphanumeric, dashes, underscores)`},
	{"a token user's token", "package/dist/index.d.ts", `token?: string;`},
	{"a token user's identifier", "package/dist/index.d.ts", `identifier?: string;`},
	// DiskResponse.
	{"disk status values", "package/dist/index.d.ts", `status: "available" | "creating" | "deleting" | "deleted" | "failed";`},
	{"disk region", "package/dist/index.d.ts", `/** @description Disk region (e.g., aws-us-east-1, gcp-us-central1) */`},
	{"disk organization", "package/dist/index.d.ts", `organization: string;`},
	{"disk provider", "package/dist/index.d.ts", `provider: string;`},
	{"disk createdAt", "package/dist/index.d.ts", `createdAt: string;`},
	// Exec.
	{"exec takes a command", "package/dist/index.d.ts", `ExecDiskRequest: {`},
	{"exec answers an exit code", "package/dist/index.d.ts", `exitCode: number;`},
	{"exec answers stdout", "package/dist/index.d.ts", `stdout: string;`},
	{"exec answers stderr", "package/dist/index.d.ts", `stderr: string;`},
	{"exec timing total", "package/dist/index.d.ts", `totalMs: number;`},
	{"exec timing queue", "package/dist/index.d.ts", `queueMs: number;`},
	{"exec timing execute", "package/dist/index.d.ts", `executeMs: number;`},
	{"exec 504 on a timeout", "package/dist/index.d.ts", `/** @description Command timed out */`},
	// Auth and hosts.
	{"auth header key-", "package/dist/index.js", "Authorization: `key-${opts.apiKey.replace(/^key-/, \"\")}`"},
	{"the object host is the control host with s3.", "package/dist/index.js", `u.hostname = u.hostname.replace(/^control\./, "s3.");`},
	{"aws-us-east-1 control host", "package/dist/index.js", `"aws-us-east-1": "https://control.green.us-east-1.aws.prod.archil.com"`},
	{"gcp region control host", "package/dist/index.js", `"gcp-us-central1": "https://control.blue.us-central1.gcp.prod.archil.com"`},
	// Object API.
	{"object paths are /disk/key", "package/dist/index.js", "const path = encodedKey ? `/${this.id}/${encodedKey}` : `/${this.id}`;"},
	{"keys are escaped per segment", "package/dist/index.js", `const encodedKey = trimmedKey.split("/").map(encodeURIComponent).join("/");`},
	{"PutObject is PUT", "package/dist/index.js", `await this._s3Request("PUT", key, { body, contentType });`},
	{"GetObject is GET", "package/dist/index.js", `await this._s3Request("GET", key);`},
	{"DeleteObject is DELETE, 404 tolerated", "package/dist/index.js", `if (!resp.ok && resp.status !== 404) {`},
	{"HeadObject is HEAD", "package/dist/index.js", `await this._s3Request("HEAD", key);`},
	{"ListObjectsV2 list-type=2", "package/dist/index.js", `const query = { "list-type": 2 };`},
	{"ListObjectsV2 delimiter", "package/dist/index.js", `if (!opts.recursive) query.delimiter = "/";`},
	{"ListObjectsV2 continuation-token", "package/dist/index.js", `query["continuation-token"] = opts.continuationToken;`},
	{"ListObjectsV2 start-after", "package/dist/index.js", `query["start-after"] = opts.startAfter;`},
	{"ListObjectsV2 result element", "package/dist/index.js", `parseXml(xml).ListBucketResult ?? {};`},
	{"ListObjectsV2 Contents Key", "package/dist/index.js", `key: String(c.Key ?? ""),`},
	{"ListObjectsV2 Contents Size", "package/dist/index.js", `size: Number(c.Size ?? 0),`},
	{"ListObjectsV2 Contents ETag", "package/dist/index.js", `etag: optionalString(c.ETag),`},
	{"ListObjectsV2 Contents LastModified", "package/dist/index.js", `lastModified: optionalDate(c.LastModified)`},
	{"ListObjectsV2 CommonPrefixes Prefix", "package/dist/index.js", `(root.CommonPrefixes ?? []).map((cp) => optionalString(cp.Prefix))`},
	{"ListObjectsV2 IsTruncated", "package/dist/index.js", `isTruncated: root.IsTruncated === "true" || root.IsTruncated === true,`},
	{"ListObjectsV2 NextContinuationToken", "package/dist/index.js", `nextContinuationToken: optionalString(root.NextContinuationToken),`},
	{"ListObjectsV2 KeyCount", "package/dist/index.js", `keyCount: root.KeyCount !== void 0 ? Number(root.KeyCount) : objects.length,`},
	{"S3 error document", "package/dist/index.js", `err = parseXml(body).Error ?? {};`},
	{"S3 error code", "package/dist/index.js", `code: tagString(err, "Code"),`},
	{"S3 error message", "package/dist/index.js", `message: tagString(err, "Message"),`},
	{"S3 NoSuchKey on a missing key", "package/dist/index.js", `(status 404, code "NoSuchKey")`},
}
