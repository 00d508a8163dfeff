# The tailhouse image: `serve`, `ingest`, `migrate` and the other commands (compose.yaml runs them).
FROM node:20-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY bin ./bin
COPY core ./core
COPY ingest ./ingest
COPY src ./src
COPY sql ./sql
COPY web ./web
COPY tsconfig.json ./
# The CLI's bundle of the sources (bin/bundle.js), built here so that no container builds it at start.
RUN node bin/bundle.js
ENV NODE_ENV=production DATA_DIR=/data
VOLUME /data
EXPOSE 3000
ENTRYPOINT ["node", "bin/tailhouse.js"]
CMD ["serve"]
